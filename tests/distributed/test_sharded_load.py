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
