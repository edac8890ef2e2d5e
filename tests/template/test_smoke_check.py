"""The scaffold's smoke check counts the calls of every kernel it binds, as the parity harness does.

A guard that never runs must not pass: bound to a slot the causal LM never calls, a reference kernel
would leave the run comparing upstream with upstream. The declarations here are llama's (in the zoo),
written into a models folder of the test's own, with a ``guarded`` tuple that claims one slot too many.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgraft.scaffold.smoke import smoke

DECLARATION = """
from transformers import LlamaConfig

from modelgraft.models.testing.dense_suite import DenseModel, DenseParitySuite

{name} = DenseModel(
    model_type="llama",
    config_class=LlamaConfig,
    causal_lm="LlamaForCausalLM",
    sequence_classification="LlamaForSequenceClassification",
    guarded={guarded!r},
)


class TestParity(DenseParitySuite):
    model = {name}
"""


def models_folder(tmp_path: Path, package: str, guarded: tuple[str, ...]) -> Path:
    """A models/ folder whose ``package`` declares llama with the slots ``guarded``."""
    tests = tmp_path / "models" / package / "tests"
    tests.mkdir(parents=True)
    text = DECLARATION.format(name=package.upper(), guarded=guarded)
    (tests / f"test_{package}_parity.py").write_text(text, encoding="utf-8")
    return tmp_path / "models"


LLAMA_SLOTS = ("rms_norm", "glu_activation", "rope", "causal_lm_loss", "sequence_classification_loss")


def test_a_scaffold_whose_guards_all_run_passes(tmp_path: Path) -> None:
    smoke("smoke_llama_ok", models_root=models_folder(tmp_path, "smoke_llama_ok", LLAMA_SLOTS))


def test_a_bound_kernel_that_is_never_called_fails_the_check(tmp_path: Path) -> None:
    """llama has no nn.LayerNorm call: a layer_norm guard it claims would never run."""
    root = models_folder(tmp_path, "smoke_llama_unreached", (*LLAMA_SLOTS, "layer_norm"))

    with pytest.raises(AssertionError, match=r"never called by the generated LlamaForCausalLM: .*'layer_norm'"):
        smoke("smoke_llama_unreached", models_root=root)


def test_a_scaffold_whose_causal_lm_calls_no_guarded_slot_fails(tmp_path: Path) -> None:
    root = models_folder(tmp_path, "smoke_llama_nothing", ("sequence_classification_loss",))

    with pytest.raises(AssertionError, match="LlamaForCausalLM calls none of the slots the scaffold guards"):
        smoke("smoke_llama_nothing", models_root=root)
