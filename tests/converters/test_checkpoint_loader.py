"""load_checkpoint: safetensors files streamed into a model, through its converter, strict by default."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from modelgraft.models.checkpoint import INDEX_FILE, CheckpointError, checkpoint_files, load_checkpoint
from modelgraft.models.converters import ConversionError, converter_for, register_converter, unregister_converter
from modelgraft.models.converters.moe import FusedExpertsConverter

THROWAWAY_MODEL_TYPE = "modelgraft_tests_toy_moe"


class Toy(nn.Module):
    """Two layers, one of them a fused experts module, a buffer, and optionally a tied head."""

    def __init__(self, tied: bool = False) -> None:
        super().__init__()
        self.config = SimpleNamespace(model_type=THROWAWAY_MODEL_TYPE)
        self.embed = nn.Embedding(11, 6)
        self.experts = nn.Module()
        self.experts.gate_up_proj = nn.Parameter(torch.zeros(2, 8, 6))
        self.experts.down_proj = nn.Parameter(torch.zeros(2, 6, 4))
        self.register_buffer("scale", torch.zeros(3))
        self.head = nn.Linear(6, 11, bias=False)
        if tied:
            self.head.weight = self.embed.weight


def _toy_checkpoint(seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(t.shape, generator=generator) for name, t in Toy().state_dict().items()}


def _per_expert(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {k: v for k, v in tensors.items() if not k.startswith("experts.")}
    for e in range(2):
        gate, up = tensors["experts.gate_up_proj"][e].chunk(2)
        out[f"experts.{e}.gate_proj.weight"] = gate.clone()
        out[f"experts.{e}.up_proj.weight"] = up.clone()
        out[f"experts.{e}.down_proj.weight"] = tensors["experts.down_proj"][e].clone()
    return out


def _assert_loaded(model: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, tensors[name]), name


@pytest.fixture
def toy_converter():
    register_converter(THROWAWAY_MODEL_TYPE, f"{__name__}.toy_converter_factory")
    yield
    unregister_converter(THROWAWAY_MODEL_TYPE)


def toy_converter_factory(config) -> FusedExpertsConverter:
    return FusedExpertsConverter(num_experts=2, hidden_size=6, intermediate_size=4)


def test_a_single_file_loads_every_tensor(tmp_path: Path) -> None:
    tensors = _toy_checkpoint()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    model = Toy()
    result = load_checkpoint(model, tmp_path / "model.safetensors", converter=None)
    _assert_loaded(model, tensors)
    assert set(result.loaded) == set(tensors) and not result.missing and not result.unexpected


def test_a_sharded_folder_is_read_through_its_index(tmp_path: Path) -> None:
    tensors = _toy_checkpoint()
    names = sorted(tensors)
    shards = {"a.safetensors": names[::2], "b.safetensors": names[1::2]}
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(tmp_path / file))
    save_file({"stray": torch.zeros(1)}, str(tmp_path / "not-in-the-index.safetensors"))
    weight_map = {k: file for file, keys in shards.items() for k in keys}
    (tmp_path / INDEX_FILE).write_text(json.dumps({"weight_map": weight_map}))
    model = Toy()
    load_checkpoint(model, tmp_path, converter=None)
    _assert_loaded(model, tensors)


def test_a_folder_without_index_reads_every_safetensors_file(tmp_path: Path) -> None:
    tensors = _toy_checkpoint()
    save_file({k: v for k, v in tensors.items() if k.startswith("e")}, str(tmp_path / "1.safetensors"))
    save_file({k: v for k, v in tensors.items() if not k.startswith("e")}, str(tmp_path / "2.safetensors"))
    assert [f.name for f in checkpoint_files(tmp_path)] == ["1.safetensors", "2.safetensors"]


def test_an_index_naming_an_absent_shard_is_an_error(tmp_path: Path) -> None:
    (tmp_path / INDEX_FILE).write_text(json.dumps({"weight_map": {"x": "gone.safetensors"}}))
    with pytest.raises(CheckpointError, match="gone.safetensors"):
        checkpoint_files(tmp_path)


def test_a_folder_without_safetensors_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no .safetensors files"):
        checkpoint_files(tmp_path)


def test_strict_loading_names_missing_and_unexpected_keys(tmp_path: Path) -> None:
    tensors = _toy_checkpoint()
    del tensors["scale"]
    tensors["extra.weight"] = torch.zeros(2)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing from the checkpoint: scale; not in the model: extra\.weight"):
        load_checkpoint(Toy(), tmp_path, converter=None)


def test_non_strict_loading_reports_missing_and_unexpected_keys(tmp_path: Path) -> None:
    tensors = _toy_checkpoint()
    del tensors["scale"]
    tensors["extra.weight"] = torch.zeros(2)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    result = load_checkpoint(Toy(), tmp_path, converter=None, strict=False)
    assert result.missing == ("scale",) and result.unexpected == ("extra.weight",)


def test_a_shape_mismatch_names_the_key_and_both_shapes(tmp_path: Path) -> None:
    tensors = _toy_checkpoint()
    tensors["embed.weight"] = torch.zeros(12, 6)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"'embed\.weight': checkpoint shape \[12, 6\], model shape \[11, 6\]"):
        load_checkpoint(Toy(), tmp_path, converter=None)


def test_a_tied_weight_is_filled_by_the_tensor_it_shares(tmp_path: Path) -> None:
    tensors = _toy_checkpoint()
    del tensors["head.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    model = Toy(tied=True)
    result = load_checkpoint(model, tmp_path, converter=None)
    assert result.missing == () and torch.equal(model.head.weight, tensors["embed.weight"])


def test_tensors_are_cast_to_the_dtype_of_the_model(tmp_path: Path) -> None:
    tensors = _toy_checkpoint()
    save_file({k: v.to(torch.bfloat16) for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    model = Toy()
    load_checkpoint(model, tmp_path, converter=None)
    assert model.embed.weight.dtype == torch.float32
    assert torch.equal(model.embed.weight, tensors["embed.weight"].to(torch.bfloat16).float())


def test_auto_uses_the_converter_registered_for_the_model_type(tmp_path: Path, toy_converter) -> None:
    tensors = _toy_checkpoint()
    save_file(_per_expert(tensors), str(tmp_path / "model.safetensors"))
    model = Toy()
    load_checkpoint(model, tmp_path)
    _assert_loaded(model, tensors)


def test_a_missing_expert_fails_the_load_naming_it(tmp_path: Path, toy_converter) -> None:
    pieces = _per_expert(_toy_checkpoint())
    del pieces["experts.1.up_proj.weight"]
    save_file(pieces, str(tmp_path / "model.safetensors"))
    with pytest.raises(ConversionError, match=r"experts\.<i>\.up_proj\.weight is missing expert\(s\) 1"):
        load_checkpoint(Toy(), tmp_path)


def test_without_a_registered_converter_auto_loads_keys_as_they_are(tmp_path: Path) -> None:
    assert converter_for(Toy().config) is None
    pieces = _per_expert(_toy_checkpoint())
    save_file(pieces, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"not in the model: experts\.0\.down_proj\.weight"):
        load_checkpoint(Toy(), tmp_path)


class _IgnoringStrayNorms(nn.Module):
    """A model whose ignore pattern for unexpected keys also matches one of its own entries (A.X-K1's
    ``mlp\\.post_mlp_layernorm``: meant for the dense layers' stray norms, it matches the sparse layers' own)."""

    _keys_to_ignore_on_load_unexpected = (r"mlp\.post_norm",)

    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(model_type=THROWAWAY_MODEL_TYPE)
        self.sparse = nn.Module()
        self.sparse.mlp = nn.Module()
        self.sparse.mlp.post_norm = nn.Linear(2, 2, bias=False)


def test_an_ignore_pattern_skips_only_keys_the_model_lacks(tmp_path: Path) -> None:
    weight = torch.arange(4.0).view(2, 2)
    stray = {"dense.mlp.post_norm.weight": torch.ones(2, 2)}
    save_file({"sparse.mlp.post_norm.weight": weight, **stray}, str(tmp_path / "model.safetensors"))
    model = _IgnoringStrayNorms()

    result = load_checkpoint(model, tmp_path, converter=None)

    assert torch.equal(model.sparse.mlp.post_norm.weight, weight)
    assert result.unexpected == ()
