"""``loaded_alike``: the reference of the checkpoint round-trip tests is the saved model as its own class loads it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from modelgraft.models.testing.loading import loaded_alike


def _saved(folder: Path) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        vocab_size=32,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    return model


def test_the_reference_holds_the_saved_weights_in_eval_mode(tmp_path: Path) -> None:
    source = _saved(tmp_path)

    loaded = loaded_alike(source, tmp_path)

    assert type(loaded) is LlamaForCausalLM and not loaded.training
    assert all(torch.equal(loaded.state_dict()[name], tensor) for name, tensor in source.state_dict().items())


def test_a_weight_changed_between_save_and_load_fails_naming_it(tmp_path: Path) -> None:
    source = _saved(tmp_path)
    file = tmp_path / "model.safetensors"
    tensors = load_file(str(file))
    tensors["model.norm.weight"] = tensors["model.norm.weight"] + 1
    save_file(tensors, str(file), metadata={"format": "pt"})

    with pytest.raises(AssertionError, match=r"does not load back what it saved: \['model.norm.weight'\]"):
        loaded_alike(source, tmp_path)
