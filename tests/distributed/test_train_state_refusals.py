"""save_train_state and load_train_state refuse what they cannot do before writing or loading anything (one process)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from modelgraft.models.distributed import apply_expert_parallel
from modelgraft.models.distributed.train_state import load_train_state, save_train_state

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


def test_a_scheduler_passed_to_load_but_not_saved_is_refused_before_anything_is_loaded(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    save_train_state(tmp_path / "state", model, optimizer, step=1)
    before = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5**step)
    with pytest.raises(ValueError, match="saved without an LR scheduler, loaded with one"):
        load_train_state(tmp_path / "state", model, optimizer, scheduler=scheduler)
    assert torch.equal(model.weight, before + 1.0), "the model was loaded before the refusal"
