"""``python -m benchmarks.run --smoke`` runs each section end to end and renders the table.

No timing is asserted (toy sizes, one repeat, a machine shared with the rest of the suite): this
only proves the benchmark script still works against the current generator and runtime. One test per
section, so pytest-xdist spreads the sections over the cores, except that the runtime and moe sections
run in one invocation: both fork their children from one preloaded interpreter (``benchmarks.child``),
whose start costs more than either section's toy steps.
No ``__init__.py`` here on purpose: as a package this folder would be named ``benchmarks`` and
shadow the repo's own ``benchmarks`` package.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Rows each section must render, beyond one row of its own.
EXPECTED_ROWS = {
    "generator": (),
    # The hybrid model's rows (its Gated DeltaNet slots' CPU kernels) and the VLM row (qwen2_5_vl with its CPU
    # kernels), each against upstream's default.
    "runtime": (
        "| runtime | qwen3_5: train step time, generated (chunked_delta kernels) / upstream default |",
        "| runtime | qwen3_5: train step peak memory, generated (chunked_delta kernels) / upstream default |",
        "| runtime | qwen2_5_vl: train step, generated with its CPU kernels / upstream default |",
        "| runtime | llava_onevision: train step, generated with its CPU kernels / upstream default |",
        "| runtime | llava_onevision: train step peak memory, generated / upstream default |",
    ),
    "loss": (),
    # The MoE section judges the grouped kernel against upstream's default and fastest experts
    # implementations, per layer and per train step of the reference MoE model.
    "moe": (
        "| moe | experts layer E=8 k=2 256 tokens, fwd+bwd: grouped vs upstream default (grouped_mm) |",
        "| moe | qwen3_moe: train step: grouped vs fastest upstream (",
        "| moe | qwen3_moe: train step peak memory, grouped / upstream default |",
        "| moe | qwen3_moe: train step, a process per configuration: grouped vs upstream default (grouped_mm) |",
    ),
}


#: The sections of each smoke invocation.
INVOCATIONS = [("generator",), ("loss",), ("moe", "runtime")]


@pytest.mark.heavy
@pytest.mark.parametrize("sections", INVOCATIONS, ids="-".join)
def test_smoke_run_renders_the_sections(sections: tuple[str, ...], tmp_path: Path) -> None:
    output = tmp_path / "latest.md"
    only = [argument for section in sections for argument in ("--only", section)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--smoke", *only, "--output", str(output)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = output.read_text(encoding="utf-8")
    assert report.strip() == proc.stdout.strip(), "the printed table and the written file differ"
    assert "| section | measurement | result | spread | budget | status | notes |" in report
    for section in sections:
        assert f"\n| {section} | " in report, f"no {section} rows"
        for row in EXPECTED_ROWS[section]:
            assert row in report
    assert "| FAILED |" not in report
    assert "budgets met" in report
    assert "SMOKE RUN" in report


def test_every_section_of_the_script_has_a_smoke_test() -> None:
    from benchmarks.run import SECTIONS  # the repository root is on the path: pytest's rootdir conftest.py

    assert set(SECTIONS) == set(EXPECTED_ROWS) == {section for sections in INVOCATIONS for section in sections}
