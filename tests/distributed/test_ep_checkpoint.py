"""load_expert_parallel_checkpoint: each ep rank reads, converts and keeps only its own experts.

The one-process tests play ep rank 0 or 1 of 2 with a stand-in state (``apply_expert_parallel`` needs only
the ep size and rank); the spawned test loads on two real gloo ranks and runs the EP forward.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from modelgraft.models.checkpoint import CheckpointError, load_checkpoint
from modelgraft.models.converters import ChainedConverter, ConversionError
from modelgraft.models.converters.moe import FusedExpertsConverter
from modelgraft.models.distributed import apply_expert_parallel, load_expert_parallel_checkpoint
from modelgraft.models.distributed.checkpoint import local_expert_range
from modelgraft.models.distributed.launch import spawn
from modelgraft.models.testing.moe_suite import per_expert_state_dict

from . import checkpoint_scenarios as cs

EXPERTS = 8  # scenarios.MOE_SIZES


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return cs.write_checkpoints(tmp_path_factory.mktemp("ep_checkpoints"))


@pytest.fixture(scope="module")
def reference(checkpoints: dict[str, Path]) -> torch.nn.Module:
    model = cs.build(1)
    load_checkpoint(model, checkpoints["fused"])
    return model


def _ep_model(ep_rank: int, ep: int = 2) -> torch.nn.Module:
    model = cs.build(2)
    apply_expert_parallel(model, SimpleNamespace(ep=ep, ep_rank=ep_rank))
    return model


def _mine(ep_rank: int, ep: int = 2) -> range:
    return range(ep_rank * EXPERTS // ep, (ep_rank + 1) * EXPERTS // ep)


def test_ep2_loading_on_two_gloo_ranks_keeps_own_experts_and_gives_one_process_logits(
    checkpoints: dict[str, Path],
) -> None:
    spawn(cs.two_rank_checkpoint_loading, 2, checkpoints, timeout=60.0)


@pytest.mark.parametrize("layout", ["per_expert", "fused", "transposed"])
@pytest.mark.parametrize(("ep", "ep_rank"), [(2, 0), (2, 1), (4, 2)])
def test_a_rank_reads_and_keeps_only_its_experts(
    checkpoints: dict[str, Path], reference: torch.nn.Module, layout: str, ep: int, ep_rank: int
) -> None:
    model = _ep_model(ep_rank, ep)
    with cs.recorded_reads() as reads:
        result = load_expert_parallel_checkpoint(model, checkpoints[layout])
    assert not result.missing and not result.unexpected
    cs.assert_only_local_experts_read(reads, layout, _mine(ep_rank, ep))
    cs.assert_local_experts(model, reference, _mine(ep_rank, ep))
    # Non-expert weights: read whole, exactly once each.
    dense = [key for key in reads.whole if ".experts." not in key]
    assert sorted(dense) == sorted(k for k in reference.state_dict() if ".experts." not in k)


def test_a_checkpoint_holding_only_this_ranks_experts_loads(tmp_path: Path, reference: torch.nn.Module) -> None:
    mine = _mine(1)
    tensors = {
        key: tensor
        for key, tensor in per_expert_state_dict(reference.state_dict()).items()
        if (m := cs.PER_EXPERT.search(key)) is None or int(m[1]) in mine
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    model = _ep_model(1)
    load_expert_parallel_checkpoint(model, tmp_path / "model.safetensors")
    cs.assert_local_experts(model, reference, mine)
    with pytest.raises(CheckpointError, match=r"(?s)ep rank 0 of 2, experts 0-3.*missing from the checkpoint: "):
        load_expert_parallel_checkpoint(_ep_model(0), tmp_path / "model.safetensors")


def test_a_missing_local_expert_is_named(tmp_path: Path, reference: torch.nn.Module) -> None:
    tensors = per_expert_state_dict(reference.state_dict())
    del tensors["model.layers.0.mlp.experts.6.up_proj.weight"]  # rank 1's
    save_file(tensors, str(tmp_path / "model.safetensors"))
    load_expert_parallel_checkpoint(_ep_model(0), tmp_path / "model.safetensors")  # rank 0 does not need it
    with pytest.raises(ConversionError) as error:
        load_expert_parallel_checkpoint(_ep_model(1), tmp_path / "model.safetensors")
    message = str(error.value)
    assert "ep rank 1 of 2, experts 4-7" in message
    assert "model.layers.0.mlp.experts.<i>.up_proj.weight is missing expert(s) 6" in message


def test_missing_fused_experts_are_named_with_the_rank(tmp_path: Path, reference: torch.nn.Module) -> None:
    tensors = {k: v for k, v in reference.state_dict().items() if k != "model.layers.0.mlp.experts.down_proj"}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError) as error:
        load_expert_parallel_checkpoint(_ep_model(1), tmp_path / "model.safetensors")
    message = str(error.value)
    assert "(ep rank 1 of 2, experts 4-7)" in message
    assert "this rank's experts are missing from the checkpoint: model.layers.0.mlp.experts.down_proj" in message
    result = load_expert_parallel_checkpoint(_ep_model(1), tmp_path / "model.safetensors", strict=False)
    assert result.missing == ("model.layers.0.mlp.experts.down_proj",)


def test_a_fused_tensor_of_the_wrong_shape_is_refused_before_reading(
    tmp_path: Path, reference: torch.nn.Module
) -> None:
    tensors = dict(reference.state_dict())
    tensors["model.layers.0.mlp.experts.down_proj"] = tensors["model.layers.0.mlp.experts.down_proj"][:6].clone()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"checkpoint shape \[6, .*whole \(all ranks'\) shape \[8, "):
        load_expert_parallel_checkpoint(_ep_model(0), tmp_path / "model.safetensors")


def _converter(config: object) -> FusedExpertsConverter:
    return FusedExpertsConverter(
        num_experts=config.num_experts, hidden_size=config.hidden_size, intermediate_size=config.moe_intermediate_size
    )


class _Plain:
    """A converter that knows nothing about experts: it fuses every expert (wrapping the real one)."""

    def __init__(self, config: object) -> None:
        self.inner = _converter(config)

    def can_handle(self, key: str) -> bool:
        return self.inner.can_handle(key)

    def convert(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        return self.inner.convert(key, tensor)

    def finalize(self) -> list[tuple[str, torch.Tensor]]:
        return self.inner.finalize()


@pytest.mark.parametrize("layout", ["per_expert", "fused"])
def test_a_converter_without_expert_hooks_still_loads_the_slice(
    checkpoints: dict[str, Path], reference: torch.nn.Module, layout: str
) -> None:
    model = _ep_model(1)
    load_expert_parallel_checkpoint(model, checkpoints[layout], converter=ChainedConverter(_Plain(reference.config)))
    cs.assert_local_experts(model, reference, _mine(1))


def test_a_chained_expert_aware_converter_still_skips_other_experts(
    checkpoints: dict[str, Path], reference: torch.nn.Module
) -> None:
    converter = ChainedConverter(_converter(reference.config))
    model = _ep_model(0)
    with cs.recorded_reads() as reads:
        load_expert_parallel_checkpoint(model, checkpoints["per_expert"], converter=converter)
    cs.assert_only_local_experts_read(reads, "per_expert", _mine(0))
    cs.assert_local_experts(model, reference, _mine(0))


def test_a_model_without_expert_parallelism_loads_as_load_checkpoint(
    checkpoints: dict[str, Path], reference: torch.nn.Module
) -> None:
    model = cs.build(2)
    load_expert_parallel_checkpoint(model, checkpoints["per_expert"])
    for name, tensor in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name


def test_restricted_converter_stacks_only_its_experts_and_slices_whole_fused_tensors() -> None:
    converter = FusedExpertsConverter(num_experts=4, hidden_size=3, intermediate_size=2).for_experts(2, 4)
    assert converter.expert_range == (2, 4)
    assert converter.expert_of("m.experts.3.gate_proj.weight") == 3
    assert converter.expert_of("m.experts.down_proj") is None
    out = []
    for expert in range(4):
        for proj in ("gate_proj", "up_proj"):
            out += converter.convert(f"m.experts.{expert}.{proj}.weight", torch.full((2, 3), float(expert)))
    ((key, gate_up),) = out
    assert key == "m.experts.gate_up_proj" and gate_up.shape == (2, 4, 3)
    assert gate_up[:, 0, 0].tolist() == [2.0, 3.0]
    ((_, down),) = converter.convert("m.experts.down_proj", torch.arange(4.0).view(4, 1, 1).expand(4, 3, 2))
    assert down.shape == (2, 3, 2) and down[:, 0, 0].tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match="not a non-empty range"):
        FusedExpertsConverter(num_experts=4, hidden_size=3, intermediate_size=2).for_experts(3, 5)


def test_local_expert_range_comes_from_the_shards() -> None:
    model = _ep_model(3, ep=4)
    from modelgraft.models.distributed import expert_shards

    assert local_expert_range(expert_shards(model)) == (6, 8)
    assert local_expert_range({}) is None
