"""FSDP2, expert parallelism, Ulysses and their combination, each equal to one process (gloo, CPU ranks).

Each test starts its ranks once (``modelgraft.models.distributed.launch.spawn``) and runs the scenarios of
``tests/distributed/scenarios.py`` there; a failed assertion on any rank fails the test with that
rank's traceback, and a hang fails it at the timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from modelgraft.models.distributed.launch import spawn

from . import scenarios

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 150.0


def test_fsdp2_on_llama_and_qwen3_moe_matches_one_process_after_an_adamw_step() -> None:
    spawn(scenarios.two_rank_fsdp, 2, timeout=TIMEOUT)


def test_ep2_outputs_aux_loss_and_gradients_match_grouped_experts_with_idle_experts() -> None:
    spawn(scenarios.two_rank_expert_parallel, 2, timeout=TIMEOUT)


def test_ulysses_sp2_on_llama_and_qwen3_and_on_qwen3_moe_with_a_4d_mask_matches_one_process() -> None:
    spawn(scenarios.two_rank_ulysses, 2, timeout=TIMEOUT)


def test_ulysses_sp2_on_sinks_latent_attention_and_dsa_matches_one_process_and_refuses_compressed_keys() -> None:
    spawn(scenarios.two_rank_ulysses_zoo_attention, 2, timeout=TIMEOUT)


def test_ep4_sp2_x_ep2_and_dp2_x_sp2_with_a_4d_mask_on_qwen3_moe_match_one_process() -> None:
    spawn(scenarios.four_rank_cases, 4, timeout=TIMEOUT)


def run_example(*flags: str) -> list[str]:
    """Run the example as a user would (``python -m``, no torchrun) and return its ``step N: ...`` lines."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("RANK", None)
    result = subprocess.run(
        [sys.executable, "-m", "modelgraft.models.distributed.example", *flags, "--timeout", str(TIMEOUT)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT + 30,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return [line for line in result.stdout.splitlines() if line.startswith("step ")]


def test_example_trains_a_tiny_qwen3_moe_with_sp_and_ep() -> None:
    losses = run_example("--nproc", "2", "--sp", "2", "--ep", "2", "--steps", "2", "--seq-len", "12")
    assert [line.split(":")[0] for line in losses] == ["step 1", "step 2"], losses
    assert all(float(line.split("loss ")[1].split()[0]) > 0 for line in losses)


def test_example_trains_with_hsdp_and_activation_checkpointing() -> None:
    losses = run_example(
        "--nproc", "2", "--sp", "1", "--ep", "1", "--hsdp", "2", "--activation-checkpointing",
        "--steps", "2", "--seq-len", "12",
    )  # fmt: skip
    assert [line.split(":")[0] for line in losses] == ["step 1", "step 2"], losses
    assert all("replicate=2" in line for line in losses), losses
