"""A model too big for one rank: built on meta, sharded, materialized per rank, loaded slice by slice.

Scenarios in ``tests/distributed/sharded_scenarios.py``; every test starts its gloo CPU ranks once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgraft.models.distributed.launch import spawn

from . import sharded_scenarios

TIMEOUT = 150.0


@pytest.fixture(scope="module")
def hub_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return sharded_scenarios.write_hub_checkpoints(tmp_path_factory.mktemp("hub"))


def test_meta_built_fsdp_and_ep_models_load_their_slices_and_train_like_one_process(
    hub_checkpoints: dict[str, Path],
) -> None:
    spawn(sharded_scenarios.two_rank_meta_fsdp, 2, hub_checkpoints, timeout=TIMEOUT)


def test_fused_expert_tensors_in_either_layout_are_read_on_their_experts_dim_only(
    hub_checkpoints: dict[str, Path],
) -> None:
    spawn(sharded_scenarios.fused_layouts_load_only_own_rows, 2, hub_checkpoints, timeout=TIMEOUT)


def test_renamed_keys_land_in_each_ranks_slice_and_a_rename_hook_keeps_reads_to_the_slice(
    hub_checkpoints: dict[str, Path],
) -> None:
    spawn(sharded_scenarios.renamed_keys_load_into_their_slices, 2, hub_checkpoints, timeout=TIMEOUT)


def test_gpt_oss_ranks_read_only_their_rows_of_every_expert_tensor_biases_included(
    hub_checkpoints: dict[str, Path],
) -> None:
    spawn(sharded_scenarios.gpt_oss_reads_only_own_experts, 2, hub_checkpoints, timeout=TIMEOUT)


def test_fsdp_x_ep_on_four_ranks_reads_only_each_ranks_experts_and_trains_like_one_process(
    hub_checkpoints: dict[str, Path],
) -> None:
    spawn(sharded_scenarios.four_rank_meta_fsdp_x_ep, 4, hub_checkpoints, timeout=TIMEOUT)


def test_hsdp_ranks_read_their_shards_slices_and_load_the_whole_models_weights(
    hub_checkpoints: dict[str, Path],
) -> None:
    spawn(sharded_scenarios.hsdp_loads_each_ranks_slices, 4, hub_checkpoints, timeout=TIMEOUT)


def test_missing_unexpected_and_misshaped_keys_are_named_and_raise_on_every_rank(tmp_path: Path) -> None:
    spawn(sharded_scenarios.errors_raise_on_every_rank, 2, sharded_scenarios.write_broken_checkpoints(tmp_path))


def test_each_rank_allocates_its_share_of_the_parameters_not_the_whole_model(tmp_path: Path) -> None:
    path, whole_bytes = sharded_scenarios.write_memory_checkpoint(tmp_path / "llama")
    spawn(sharded_scenarios.each_rank_allocates_its_share, 2, path, whole_bytes, timeout=TIMEOUT)
