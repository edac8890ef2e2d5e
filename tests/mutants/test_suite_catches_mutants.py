"""The parity suite catches the bugs that matter: each planted in a temporary copy of the repository, it fails.

Each mutant is one small deliberate bug in a snippet (or, for the eager path, which is upstream's own
code, in the generated file): the working tree is copied to a temporary directory (tracked and
untracked-but-not-ignored files, as ``git ls-files -co --exclude-standard`` lists them), the bug is
planted in the copy, qwen3_moe's modeling is regenerated there, and the part of qwen3_moe's suite that
should notice runs in a subprocess on the copy. The real files are never touched.

The test asserts the selected tests pass on an unmutated copy (so a failure is the mutant's doing) and
that, with the mutant, the named tests fail (pytest exit 1, not a collection error). qwen3_moe is the
one model whose suite reaches every mutated guard: norms, a dense GLU layer, the router, the causal-LM loss
with the aux loss, and the classification head.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from modelgraft.models.testing.preloaded_python import run_module
from modelgraft.scaffold.import_root import import_root

REPO = Path(__file__).resolve().parents[2]
MODEL = "qwen3_moe"
CONFIG = f"models.{MODEL}.{MODEL}_gpu_patch_gen_config"
GENERATED = f"models/{MODEL}/generated/patched_modeling_{MODEL}_gpu.py"
SUITE = f"models/{MODEL}/tests/test_{MODEL}_parity.py::TestQwen3MoeParity"


def _one_slot(head: str, slot: str, dtype: str) -> str:
    return f"test_reference_kernel_in_one_slot_matches_upstream[gpu-{head}-{slot}-{dtype}]"


@dataclass(frozen=True)
class Mutant:
    name: str
    #: the file of the copy to edit, relative to the repository root
    path: str
    #: a regular expression matching the code to change (exactly once) and its replacement
    pattern: str
    replacement: str
    #: the tests (node names inside the suite class) that must fail
    caught_by: tuple[str, ...]
    #: plant the bug after regenerating (the eager path is upstream's code, only the generated file has it)
    after_generation: bool = False

    def plant(self, root: Path) -> None:
        target = root / self.path
        text = target.read_text(encoding="utf-8")
        mutated, count = re.subn(self.pattern, self.replacement, text)
        if count != 1:
            raise AssertionError(
                f"mutant {self.name}: {self.pattern!r} matches {count} times in {self.path}, not once; "
                "the code it mutates changed, update the mutant"
            )
        target.write_text(mutated, encoding="utf-8")


MUTANTS = (
    Mutant(
        "rms_norm_eager_path_casts_after_the_weight",
        GENERATED,
        r"return self\.weight \* hidden_states\.to\(input_dtype\)",
        "return (self.weight * hidden_states).to(input_dtype)",
        ("test_causal_lm_logits_loss_and_gradients_match_upstream[gpu-bf16]",),
        after_generation=True,
    ),
    Mutant(
        "rms_norm_slot_call_casts_after_the_weight",
        "generator/snippets/rms_norm_guard.py.j2",
        r'"rms_weight": ""',
        '"rms_weight": ", cast_last=True"',
        (_one_slot("causal_lm", "rms_norm", "bf16"),),
    ),
    Mutant(
        "rms_norm_slot_call_hard_codes_eps",
        "generator/snippets/rms_norm_guard.py.j2",
        r"self\.\{\{ eps \}\}",
        "1e-6",
        (_one_slot("causal_lm", "rms_norm", "fp32"),),
    ),
    Mutant(
        "aux_loss_slot_call_drops_the_attention_mask",
        "generator/snippets/causal_lm_loss_guard.py.j2",
        r"load_balancing_loss_slot\(\{\{ aux\.args \| join\(\", \"\) \}\}\)",
        'load_balancing_loss_slot({{ aux.args[:-1] | join(", ") }}, None)',
        (_one_slot("causal_lm", "load_balancing_loss", "fp32"),),
    ),
    Mutant(
        "sequence_classification_loss_gets_scaled_logits",
        "generator/snippets/sequence_classification_forward.py.j2",
        r"sequence_classification_loss_slot\(logits, labels, pooled_logits, self\.config\)",
        "sequence_classification_loss_slot(logits, labels, pooled_logits * 2, self.config)",
        (_one_slot("sequence_classification", "sequence_classification_loss", "fp32"),),
    ),
    Mutant(
        "causal_lm_loss_guard_disabled",
        "generator/snippets/causal_lm_loss_guard.py.j2",
        r'"labels is not None and causal_lm_loss_slot\.use_non_eager_impl"',
        '"labels is not None and causal_lm_loss_slot.use_non_eager_impl and False"',
        ("test_chunked_loss_and_gradients_match_upstream[gpu-fp32]",),
    ),
    Mutant(
        "glu_slot_call_swaps_gate_and_up",
        "generator/snippets/glu_mlp_guard.py.j2",
        r"glu_activation_slot\(self\.\{\{ gate \}\}\(\{\{ x \}\}\), self\.\{\{ up \}\}\(\{\{ x \}\}\)",
        "glu_activation_slot(self.{{ up }}({{ x }}), self.{{ gate }}({{ x }})",
        (_one_slot("causal_lm", "glu_activation", "fp32"),),
    ),
    Mutant(
        "softmax_topk_router_slot_call_drops_the_renormalisation",
        "generator/snippets/softmax_topk_router_guard.py.j2",
        r"norm_topk_prob=\{\{ norm \}\}",
        "norm_topk_prob=False",
        (_one_slot("causal_lm", "softmax_topk_router", "fp32"),),
    ),
)


def _copy_working_tree(destination: Path) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("the mutants copy the working tree as git lists it; no git checkout here")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    for relative in filter(None, listed.split("\0")):
        source = REPO / relative
        if source.is_file():  # a deleted but still tracked file is listed too
            (destination / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / relative)


def _env(root: Path) -> dict[str, str]:
    """This environment, importing modelgraft from the copy ``root``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "COV_"))}
    return env | {"PYTHONPATH": str(import_root(root)), "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}


def _run(root: Path, *args: str, timeout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=root, env=_env(root), capture_output=True, text=True, timeout=timeout, check=False
    )


def _regenerate(root: Path) -> str:
    done = _run(root, "-m", "modelgraft.generator", CONFIG, timeout=300)
    assert done.returncode == 0, f"regenerating {CONFIG} failed:\n{done.stdout}\n{done.stderr}"
    return (root / GENERATED).read_text(encoding="utf-8")


def _suite(root: Path, tests: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """The named tests of the copy, in a process that starts with torch and transformers imported (not modelgraft)."""
    nodes = [f"{SUITE}::{test}" for test in tests]
    args = ("-q", "-rf", "-p", "no:cacheprovider", "-n", "0", "--basetemp", str(root.parent / "suite-tmp"), *nodes)
    return run_module("pytest", *args, cwd=root, env=_env(root), timeout=600)


@pytest.fixture
def copy_of_the_repository(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    _copy_working_tree(root)
    return root


def test_the_selected_tests_pass_on_an_unmutated_copy(copy_of_the_repository: Path) -> None:
    root = copy_of_the_repository
    _regenerate(root)
    tests = tuple(sorted({test for mutant in MUTANTS for test in mutant.caught_by}))
    done = _suite(root, tests)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"{len(tests)} passed" in done.stdout


@pytest.mark.parametrize("mutant", MUTANTS, ids=[mutant.name for mutant in MUTANTS])
def test_the_suite_fails_on_the_mutant(copy_of_the_repository: Path, mutant: Mutant) -> None:
    root = copy_of_the_repository
    # The copy's generated file is what regeneration writes: the zoo is kept free of drift (tests/engine/test_repo.py).
    original = (root / GENERATED).read_text(encoding="utf-8")
    mutant.plant(root)
    if not mutant.after_generation:
        _regenerate(root)
    assert (root / GENERATED).read_text(encoding="utf-8") != original, f"{mutant.name} changed no generated code"

    done = _suite(root, mutant.caught_by)
    output = done.stdout + done.stderr
    assert done.returncode == 1, f"{mutant.name} survived (exit {done.returncode}):\n{output[-4000:]}"
    failed = set(re.findall(r"^FAILED \S+::(\S+)", done.stdout, flags=re.MULTILINE))
    assert set(mutant.caught_by) <= failed, f"{mutant.name}: expected {mutant.caught_by} to fail:\n{output[-4000:]}"
