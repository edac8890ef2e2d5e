"""``benchmarks/run.py --smoke`` runs every section end to end and renders the table.

No timing is asserted (toy sizes, one repeat, a machine shared with the rest of the suite): this
only proves the benchmark script still works against the current generator and runtime.
No ``__init__.py`` here on purpose: as a package this folder would be named ``benchmarks`` and
shadow the repo's own ``benchmarks`` package.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_smoke_run_renders_every_section(tmp_path: Path) -> None:
    output = tmp_path / "latest.md"
    proc = subprocess.run(
        [sys.executable, "benchmarks/run.py", "--smoke", "--output", str(output)],
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
    for section in ("generator", "runtime", "loss", "moe"):
        assert f"\n| {section} | " in report, f"no {section} rows"
    # The MoE section judges the grouped kernel against upstream's default and fastest experts implementations,
    # per layer and per train step of the zoo's MoE model(s).
    assert "| moe | experts layer E=8 k=2 256 tokens, fwd+bwd: grouped vs upstream default (grouped_mm) |" in report
    assert "| moe | qwen3_moe: train step: grouped vs fastest upstream (" in report
    assert "| moe | qwen3_moe: train step peak memory, grouped / upstream default |" in report
    assert "| FAILED |" not in report
    assert "budgets met" in report
    assert "SMOKE RUN" in report
