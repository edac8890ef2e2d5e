"""One-process checks: parallel sizes, the parallel plans of the zoo, sequence slicing, kernel misuse."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from modelgraft import models
from modelgraft.models.distributed import (
    ParallelConfigError,
    parallel_sizes,
    sequence_slice,
    shard_sequence,
    validate_parallel_plan,
)
from modelgraft.models.distributed.expert_parallel import moe_experts, parse_placement, plan_matches
from modelgraft.models.distributed.losses import causal_lm_loss
from modelgraft.models.distributed.sequence import padded_length
from modelgraft.models.loader import build_model
from modelgraft.models.ops import OpsConfig, bind_ops, bound_ops, current_ops
from modelgraft.models.ops.errors import OpsConfigError
from modelgraft.models.testing.declarations import model_declarations
from modelgraft.models.testing.dense_suite import DenseModel
from modelgraft.models.testing.moe_suite import MoeModel


def _zoo() -> list[DenseModel]:
    """Every model declaration of the zoo's parity tests (models/<m>/tests)."""
    found = {id(d): d for package in models.MODEL_PACKAGES for d in model_declarations(package)}
    return sorted(found.values(), key=lambda declaration: declaration.model_type)


ZOO = _zoo()


def test_the_zoo_is_found_and_holds_a_moe_model() -> None:
    assert {d.model_type for d in ZOO} >= {"llama", "qwen3", "qwen3_moe"}
    assert any(isinstance(d, MoeModel) for d in ZOO)


@pytest.mark.parametrize("declaration", ZOO, ids=lambda d: d.model_type)
def test_every_parallel_plan_fits_its_model(declaration: DenseModel) -> None:
    """Each pattern names a parameter, shards a dim that divides by ep, and covers every expert tensor."""
    if not isinstance(declaration, MoeModel):
        model = build_model(declaration.config(), architecture=declaration.causal_lm)
        assert not getattr(model, "get_parallel_plan", dict)(), "a dense model with a plan: test it like a MoE one"
        assert validate_parallel_plan(model, ep=2) == {}
        return
    config = declaration.config(**{declaration.num_experts_attr: 8})
    model = build_model(config, architecture=declaration.causal_lm)
    plan = model.get_parallel_plan()
    names = [name for name, _ in model.named_parameters()]
    assert plan and all(plan_matches(pattern, names) for pattern in plan)
    for ep in (1, 2, 4, 8):
        sharded = validate_parallel_plan(model, ep=ep)
        assert set(sharded) == {name for name in names if ".experts." in name}
    with pytest.raises(ParallelConfigError, match="does not divide by ep=3"):
        validate_parallel_plan(model, ep=3)


def test_plan_errors_are_collected_and_named() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 6))
    plan = {"0.weight": "shard(0)", "*.bias": "shard(1)", "1.weight": "shard(0)"}
    with pytest.raises(ParallelConfigError) as error:
        validate_parallel_plan(model, ep=4, plan=plan)
    message = str(error.value)
    assert "0.weight [6, 4]: dim 0 of size 6 does not divide by ep=4" in message
    assert "0.bias [6] has no dim 1" in message
    assert "'1.weight' matches no parameter" in message


def test_plan_patterns_and_placements() -> None:
    names = ["model.layers.0.mlp.experts.down_proj", "model.layers.10.mlp.experts.down_proj", "model.x.0.y.down_proj"]
    assert plan_matches("model.layers.*.mlp.experts.down_proj", names) == names[:2]
    assert plan_matches("model.*.experts.down_proj", names) == []  # "*" is one component, never several
    assert parse_placement("shard(0)") == 0 and parse_placement("Shard(2)") == 2
    assert parse_placement("replicate") is None
    with pytest.raises(ParallelConfigError, match="unknown placement"):
        parse_placement("colwise")


@pytest.mark.parametrize(
    ("world", "sizes", "expected"),
    [(4, {"sp": 2, "ep": 2}, (2, 2, 2)), (4, {"ep": 4}, (4, 1, 4)), (8, {"sp": 4, "dp": 2, "ep": 8}, (2, 4, 8))],
)
def test_parallel_sizes(world: int, sizes: dict, expected: tuple) -> None:
    assert parallel_sizes(world, **sizes) == expected


@pytest.mark.parametrize(
    ("world", "sizes", "message"),
    [
        (4, {"sp": 3}, "sp=3 does not divide the world of 4 ranks"),
        (4, {"ep": 3}, "ep=3 does not divide the world size 4"),
        (4, {"dp": 3, "sp": 2}, r"dp \* sp = 3 \* 2 = 6 is not the world size 4"),
        (4, {"sp": 0}, "sp must be a positive int"),
    ],
)
def test_parallel_sizes_that_do_not_divide_the_world_raise_one_clear_error(
    world: int, sizes: dict, message: str
) -> None:
    with pytest.raises(ParallelConfigError, match=message):
        parallel_sizes(world, **sizes)


def test_sequence_slices_cover_the_padded_sequence() -> None:
    assert padded_length(11, 2) == 12 and padded_length(12, 4) == 12 and padded_length(1, 4) == 4
    assert [sequence_slice(11, 2, r) for r in range(2)] == [slice(0, 6), slice(6, 12)]


def test_shard_sequence_pads_slices_and_shifts_before_slicing() -> None:
    input_ids = torch.arange(1, 12).reshape(1, 11)
    labels = input_ids.clone()
    labels[0, 0] = -100
    parts = [
        shard_sequence({"input_ids": input_ids, "labels": labels}, SimpleNamespace(sp=2, sp_rank=r), pad_token_id=0)
        for r in range(2)
    ]
    whole = {key: torch.cat([part[key] for part in parts], dim=1) for key in parts[0]}
    assert torch.equal(whole["input_ids"], torch.cat((input_ids, torch.zeros(1, 1, dtype=torch.long)), dim=1))
    assert torch.equal(whole["attention_mask"], torch.tensor([[1] * 11 + [0]]))
    assert torch.equal(whole["position_ids"], torch.arange(12).unsqueeze(0))
    assert torch.equal(whole["labels"], torch.cat((labels, torch.tensor([[-100]])), dim=1))
    # Position 5 (rank 0's last) predicts label 6, which lives on rank 1.
    assert parts[0]["shift_labels"][0, -1] == 7 and parts[1]["shift_labels"][0, -2:].tolist() == [-100, -100]


def _causal_bool(real: torch.Tensor) -> torch.Tensor:
    size = real.shape[-1]
    return (torch.arange(size).view(1, -1) <= torch.arange(size).view(-1, 1)) & real.bool()[:, None, None, :]


def _shard_with_mask(mask: object, sp_rank: int = 0) -> dict:
    batch = {"input_ids": torch.arange(1, 12).reshape(1, 11), "attention_mask": mask}
    return shard_sequence(batch, SimpleNamespace(sp=2, sp_rank=sp_rank), pad_token_id=0)


@pytest.mark.parametrize("sp_rank", [0, 1])
def test_shard_sequence_keeps_a_4d_mask_whole_on_every_rank_padded_to_the_multiple_of_sp(sp_rank: int) -> None:
    """Ulysses attention attends over the whole sequence, so every rank needs the whole mask."""
    real = torch.tensor([[1] * 9 + [0] * 2])
    mask = _shard_with_mask(_causal_bool(real), sp_rank)["attention_mask"]
    assert torch.equal(mask, _causal_bool(torch.cat((real, torch.zeros(1, 1, dtype=torch.long)), dim=1)))


def test_shard_sequence_pads_an_additive_4d_mask_with_the_dtypes_minimum() -> None:
    additive = torch.zeros(1, 1, 11, 11).masked_fill(~_causal_bool(torch.ones(1, 11)), torch.finfo(torch.float32).min)
    mask = _shard_with_mask(additive)["attention_mask"]
    assert mask.shape == (1, 1, 12, 12)
    assert mask[0, 0, 11, 11] == torch.finfo(torch.float32).min, "the padding position must mask itself"
    assert torch.equal(mask[0, 0, 11, :11], torch.zeros(11)), "a padding query must attend something (no NaN)"


def test_shard_sequence_keeps_a_dict_of_4d_masks_whole() -> None:
    masks = _shard_with_mask({"full_attention": _causal_bool(torch.ones(1, 11)), "sliding_attention": None})
    assert masks["attention_mask"]["full_attention"].shape == (1, 1, 12, 12)
    assert masks["attention_mask"]["sliding_attention"] is None


def test_shard_sequence_refuses_a_4d_mask_that_is_not_the_whole_sequence() -> None:
    with pytest.raises(ValueError, match=r"shape \(1, 1, 6, 11\).*\[batch, heads, 11, 11\]"):
        _shard_with_mask(_causal_bool(torch.ones(1, 11))[:, :, :6])


def test_distributed_kernels_without_their_group_say_how_to_bind_them() -> None:
    x = torch.zeros(2, 4)
    with pytest.raises(ParallelConfigError, match="parallel_ops"):
        moe_experts(
            x,
            torch.zeros(2, 1, dtype=torch.long),
            torch.ones(2, 1),
            torch.zeros(1, 6, 4),
            torch.zeros(1, 4, 3),
            "silu",
        )
    with pytest.raises(ValueError, match="parallel_ops"):
        causal_lm_loss(x.unsqueeze(0), torch.zeros(5, 4), torch.zeros(1, 2, dtype=torch.long), vocab_size=5)


def test_the_distributed_kernels_are_registered_with_their_options() -> None:
    config = OpsConfig(
        {"moe_experts": "ep_alltoall", "causal_lm_loss": "global_batch", "load_balancing_loss": "global_batch"},
        kernel_options={"moe_experts": {"group": None}, "causal_lm_loss": {"inner": "chunked", "chunk_size": 4}},
    )
    with bound_ops(config):  # loads each kernel and checks its options against its signature
        assert current_ops() == {
            "causal_lm_loss": "global_batch",
            "moe_experts": "ep_alltoall",
            "load_balancing_loss": "global_batch",
        }
    with pytest.raises(OpsConfigError, match="takes no option"):
        bind_ops(OpsConfig({"moe_experts": "ep_alltoall"}, kernel_options={"moe_experts": {"groups": None}}))
