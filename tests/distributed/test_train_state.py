"""save_train_state / load_train_state (torch.distributed.checkpoint): a run saved at step k and resumed
(model, optimizer, LR scheduler, RNG, data position) continues as the run that never stopped, on the same
ranks (FSDP, and HSDP) and resharded from 4 ranks under HSDP to 2 under FSDP.

Scenarios in ``tests/distributed/resume_scenarios.py``; the model is the meta-built qwen3_moe under EP x FSDP,
loaded from the hub checkpoint of ``test_sharded_load.py``'s scenarios.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgraft.models.distributed.launch import spawn

from . import resume_scenarios, sharded_scenarios

TIMEOUT = 180.0


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sharded_scenarios.write_hub_checkpoints(tmp_path_factory.mktemp("hub"))["qwen3_moe"]


def test_resumed_run_gives_the_uninterrupted_runs_next_losses_and_random_draws(hub: Path, tmp_path: Path) -> None:
    spawn(resume_scenarios.resume_on_the_same_ranks, 2, hub, tmp_path / "step2", timeout=TIMEOUT)


def test_an_hsdp_run_saved_on_four_ranks_resumes_there_bitwise_and_on_two_with_the_same_next_losses(
    hub: Path, tmp_path: Path
) -> None:
    record = tmp_path / "four_ranks.json"
    spawn(resume_scenarios.save_on_four_ranks, 4, hub, tmp_path / "step2", record, timeout=TIMEOUT)
    spawn(resume_scenarios.resume_on_two_ranks, 2, tmp_path / "step2", record, timeout=TIMEOUT)


def test_experts_sharded_on_their_rows_load_from_the_hub_and_resume_bitwise(tmp_path: Path) -> None:
    hub = resume_scenarios.write_row_sharded_hub(tmp_path / "hub")
    spawn(resume_scenarios.experts_sharded_on_rows_load_and_resume, 4, hub, tmp_path / "step1", timeout=TIMEOUT)
