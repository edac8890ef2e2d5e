"""The scaffold's smoke check counts the calls of every kernel it binds, as the parity harness does.

A guard that never runs must not pass: bound to a slot the causal LM never calls, a reference kernel
would leave the run comparing upstream with upstream. The declarations here are llama's (in the zoo),
written into a models folder of the test's own, with a ``guarded`` tuple that claims one slot too many.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgraft.models.testing.parity import UpstreamStepError
from modelgraft.scaffold.smoke import main, smoke

DECLARATION = """
from transformers import LlamaConfig

from modelgraft.models.testing.dense_suite import DenseModel, DenseParitySuite

{name} = DenseModel(
    model_type="llama",
    config_class=LlamaConfig,
    causal_lm="LlamaForCausalLM",
    sequence_classification="LlamaForSequenceClassification",
    guarded={guarded!r},
    sizes={sizes!r},
)


class TestParity(DenseParitySuite):
    model = {name}
"""


def models_folder(
    tmp_path: Path,
    package: str,
    guarded: tuple[str, ...],
    sizes: dict[str, object] | None = None,
    folder: str = "models",
) -> Path:
    """A models/ folder whose ``package`` declares llama with the slots ``guarded`` and tiny ``sizes`` on top."""
    tests = tmp_path / folder / package / "tests"
    tests.mkdir(parents=True)
    text = DECLARATION.format(name=package.upper(), guarded=guarded, sizes=sizes or {})
    (tests / f"test_{package}_parity.py").write_text(text, encoding="utf-8")
    return tmp_path / folder


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


def test_a_tiny_config_upstream_itself_cannot_run_is_blamed_on_the_config_not_the_scaffold(tmp_path: Path) -> None:
    """An activation transformers does not know: upstream's own model cannot be built."""
    root = models_folder(tmp_path, "smoke_llama_bad_config", LLAMA_SLOTS, sizes={"hidden_act": "no_such_activation"})

    with pytest.raises(UpstreamStepError, match=r"upstream LlamaForCausalLM itself fails on this config and batch"):
        smoke("smoke_llama_bad_config", models_root=root)


def test_the_copy_task_says_the_tiny_config_not_the_new_model_is_at_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sizes = {"hidden_act": "no_such_activation"}
    root = models_folder(tmp_path, "smoke_llama_task", LLAMA_SLOTS, sizes=sizes, folder="smoke_task_models")
    (root / "__init__.py").write_text("", encoding="utf-8")
    (root / "smoke_llama_task" / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))

    assert main(["smoke_llama_task", "--package", "smoke_task_models.smoke_llama_task"]) == 1

    err = capsys.readouterr().err
    assert "upstream's own model fails on the tiny config before smoke_task_models.smoke_llama_task" in err
    assert "does not match upstream" not in err
