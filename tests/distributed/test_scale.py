"""Training at scale: activation checkpointing, HSDP and the experts' shard dim, each equal to one process.

The multi-rank scenarios are in ``tests/distributed/scale_scenarios.py`` (gloo, CPU ranks, started once per
test by ``launch.spawn``); the rest check what is decided before any rank communicates. That checkpointing
lowers activation memory is measured by ``benchmarks/distributed_bench.py``, not asserted here.
"""

from __future__ import annotations

import pytest
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

from modelgraft.models.distributed import (
    ParallelConfigError,
    apply_activation_checkpointing,
    checkpointed_layers,
    expert_shard_dim,
    hsdp_sizes,
    strip_checkpoint_prefix,
)
from modelgraft.models.distributed.launch import spawn

from . import scale_scenarios
from .scenarios import config_of, fresh_model

TIMEOUT = 240.0


# -- activation checkpointing ----------------------------------------------------------------------------------
def test_activation_checkpointing_wraps_each_decoder_layer_once_and_keeps_state_dict_keys() -> None:
    model = fresh_model("qwen3_moe", config_of("qwen3_moe"))
    keys = list(model.state_dict())
    wrappers = apply_activation_checkpointing(model)
    assert len(wrappers) == model.config.num_hidden_layers
    assert all(isinstance(layer, CheckpointWrapper) for layer in model.model.layers)
    assert apply_activation_checkpointing(model) == [], "a second call must not wrap a wrapper"
    assert len(checkpointed_layers(model)) == model.config.num_hidden_layers
    assert list(model.state_dict()) == keys
    assert sorted(strip_checkpoint_prefix(n) for n, _ in model.named_parameters()) == sorted(
        n for n in keys if "rotary" not in n
    )


def test_checkpointing_under_fsdp_x_ep_gives_the_one_process_train_step() -> None:
    spawn(scale_scenarios.checkpointing_under_fsdp_x_ep, 4, timeout=TIMEOUT)


def test_checkpointing_under_ulysses_x_ep_x_fsdp_gives_the_one_process_train_step() -> None:
    spawn(scale_scenarios.checkpointing_under_ulysses_x_ep_x_fsdp, 4, timeout=TIMEOUT)


# -- HSDP ------------------------------------------------------------------------------------------------------
def test_hsdp_sizes_shard_within_a_replica() -> None:
    assert hsdp_sizes(256, 32, ep=8) == (8, 1)
    assert hsdp_sizes(4, 2) == (2, 2)


@pytest.mark.parametrize(("world", "replicate", "ep"), [(4, 3, 1), (8, 4, 4), (4, 0, 1)])
def test_hsdp_sizes_refuse_a_replica_that_splits_an_ep_group(world: int, replicate: int, ep: int) -> None:
    with pytest.raises(ParallelConfigError, match="replicate"):
        hsdp_sizes(world, replicate, ep)


def test_hsdp_2x2_with_and_without_ep_gives_the_one_process_train_step() -> None:
    spawn(scale_scenarios.hsdp_2x2, 4, timeout=TIMEOUT)


# -- experts' shard dim ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "shard_size", "dim"),
    [
        ((16, 512, 256), 32, 1),  # 128 experts / ep=8 over 32 FSDP ranks: dim 0 would pad
        ((16, 512, 256), 8, 0),  # experts divide: dim 0
        ((3, 8, 4), 2, 1),
        ((3, 5, 4), 2, 0),  # neither divides: dim 0, padded
        ((3,), 2, 0),
    ],
)
def test_expert_shard_dim_is_1_only_when_dim_0_would_pad_and_dim_1_divides(
    shape: tuple[int, ...], shard_size: int, dim: int
) -> None:
    assert expert_shard_dim(shape, shard_size) == dim


def test_experts_shard_on_dim_1_when_dim_0_would_pad_and_match_one_process() -> None:
    spawn(scale_scenarios.experts_shard_on_dim_1_when_dim_0_would_pad, 4, timeout=TIMEOUT)


# -- host syncs of the ep dispatch --------------------------------------------------------------------------------
def test_ep_dispatch_with_its_local_grouped_experts_makes_one_host_sync_per_moe_layer_forward_and_backward() -> None:
    spawn(scale_scenarios.ep_dispatch_syncs_the_host_once, 2, timeout=TIMEOUT)
