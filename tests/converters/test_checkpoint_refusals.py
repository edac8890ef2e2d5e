"""load_checkpoint is all or nothing: a checkpoint that does not fit is refused before any tensor of the model
changes, and the error names the file and the tensor."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from modelgraft.models.checkpoint import CheckpointError, load_checkpoint
from modelgraft.models.converters import ConversionError
from modelgraft.models.converters.moe import FusedExpertsConverter

from .test_checkpoint_loader import Toy, _per_expert, _toy_checkpoint


def _shards(tmp_path: Path, tensors: dict[str, torch.Tensor], count: int = 4) -> list[Path]:
    """``tensors`` over ``count`` files in key order (no index: every file of the folder is read)."""
    names = sorted(tensors)
    files = []
    for number in range(count):
        file = tmp_path / f"part-{number}.safetensors"
        save_file({key: tensors[key] for key in names[number::count]}, str(file))
        files.append(file)
    return files


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def _unchanged(model: nn.Module, before: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())


def test_a_corrupt_shard_is_named_and_nothing_is_loaded(tmp_path: Path) -> None:
    files = _shards(tmp_path, _toy_checkpoint())
    files[-1].write_bytes(files[-1].read_bytes()[:-8])  # truncated: the last file to be read
    model = Toy()
    before = _snapshot(model)
    with pytest.raises(CheckpointError, match=rf"{files[-1]}: not a readable safetensors file"):
        load_checkpoint(model, tmp_path, converter=None)
    assert _unchanged(model, before)


def test_a_shape_mismatch_in_the_last_shard_names_file_and_tensor_and_loads_nothing(tmp_path: Path) -> None:
    tensors = _toy_checkpoint()
    tensors["scale"] = torch.ones(4)  # the model's is [3]
    files = _shards(tmp_path, tensors)
    holding = next(f for f in files if "scale" in f.read_bytes().decode("latin-1")[:400])
    model = Toy()
    before = _snapshot(model)
    with pytest.raises(CheckpointError, match=rf"{holding}: 'scale': checkpoint shape \[4\], model shape \[3\]"):
        load_checkpoint(model, tmp_path, converter=None)
    assert _unchanged(model, before)


def test_a_strict_load_missing_a_key_loads_nothing(tmp_path: Path) -> None:
    tensors = _toy_checkpoint()
    del tensors["head.weight"]
    _shards(tmp_path, tensors)
    model = Toy()
    before = _snapshot(model)
    with pytest.raises(CheckpointError, match=r"missing from the checkpoint: head\.weight"):
        load_checkpoint(model, tmp_path, converter=None)
    assert _unchanged(model, before)


def test_an_incomplete_expert_layer_loads_nothing(tmp_path: Path) -> None:
    tensors = _per_expert(_toy_checkpoint())
    del tensors["experts.1.up_proj.weight"]
    _shards(tmp_path, tensors)
    model = Toy()
    before = _snapshot(model)
    converter = FusedExpertsConverter(num_experts=2, hidden_size=6, intermediate_size=4)
    with pytest.raises(ConversionError, match=r"experts\.<i>\.up_proj\.weight is missing expert\(s\) 1"):
        load_checkpoint(model, tmp_path, converter=converter)
    assert _unchanged(model, before)


def test_the_converter_given_is_left_fresh_by_the_check(tmp_path: Path) -> None:
    tensors = _toy_checkpoint()
    _shards(tmp_path, _per_expert(tensors))
    converter = FusedExpertsConverter(num_experts=2, hidden_size=6, intermediate_size=4)
    model = Toy()
    load_checkpoint(model, tmp_path, converter=converter)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, tensors[name]), name


def test_a_check_that_refuses_leaves_the_model_as_it_was(tmp_path: Path) -> None:
    _shards(tmp_path, _toy_checkpoint())
    model = Toy()
    before = _snapshot(model)

    def refuse(result: object) -> None:
        raise CheckpointError("refused by the caller")

    with pytest.raises(CheckpointError, match="refused by the caller"):
        load_checkpoint(model, tmp_path, converter=None, check=refuse)
    assert _unchanged(model, before)
