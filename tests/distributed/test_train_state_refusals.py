"""save_train_state refuses what it cannot save per expert, before writing anything (one process)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from modelgraft.models.distributed import apply_expert_parallel
from modelgraft.models.distributed.train_state import save_train_state

from . import checkpoint_scenarios as cs


def test_experts_the_plan_splits_on_another_dim_than_the_experts_dim_are_refused_by_name(tmp_path: Path) -> None:
    model = cs.build(0)
    model.get_parallel_plan = lambda: {"model.layers.*.mlp.experts.down_proj": "shard(1)"}
    apply_expert_parallel(model, SimpleNamespace(ep=2, ep_rank=0))
    optimizer = torch.optim.AdamW(model.parameters())
    with pytest.raises(
        ValueError, match=r"whole experts along dim 0, but the plan splits model\.layers\.0\.mlp\.experts\.down_proj"
    ):
        save_train_state(tmp_path / "state", model, optimizer, step=0)
    assert not (tmp_path / "state").exists()
