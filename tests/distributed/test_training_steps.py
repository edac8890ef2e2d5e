"""Train steps under expert parallelism, FSDP x EP, bf16 and accumulation, each equal to one process.

The scenarios are in ``tests/distributed/training_scenarios.py``; every test starts its ranks once
(``launch.spawn``: gloo, CPU ranks) and fails with the traceback of the first rank that fails. The
4-rank tests run ep=2, so ``ep_replicate`` is 2 and FSDP shards each ep rank's 3 experts unevenly (padded).
"""

from __future__ import annotations

from modelgraft.models.distributed.launch import spawn

from . import training_scenarios

TIMEOUT = 150.0


def test_gpt_oss_ep2_expert_biases_get_the_one_process_gradient() -> None:
    spawn(training_scenarios.gpt_oss_ep2_train_step, 2, timeout=TIMEOUT)


def test_fsdp_x_ep_train_step_with_padded_experts_matches_one_process() -> None:
    spawn(training_scenarios.fsdp_x_ep_train_steps, 4, timeout=TIMEOUT)


def test_clip_grad_norm_under_fsdp_x_ep_is_the_one_process_norm_on_every_rank() -> None:
    spawn(training_scenarios.fsdp_x_ep_clipping, 4, timeout=TIMEOUT)


def test_clip_grad_norm_under_ep_alone_sums_the_expert_norms_over_the_ep_ranks() -> None:
    spawn(training_scenarios.ep2_clipping_without_fsdp, 2, timeout=TIMEOUT)


def test_sp2_x_ep2_x_fsdp_train_step_with_clipping_matches_one_process() -> None:
    spawn(training_scenarios.sp_x_ep_x_fsdp_train_step, 4, timeout=TIMEOUT)


def test_bf16_fsdp_x_ep_train_step_matches_one_process_within_bf16_precision() -> None:
    spawn(training_scenarios.fsdp_x_ep_bf16_train_step, 4, timeout=TIMEOUT)


def test_bf16_policy_reduces_gradients_in_fp32_and_keeps_routers_in_fp32() -> None:
    spawn(training_scenarios.bf16_policy_reduces_in_fp32_and_routes_in_fp32, 2, timeout=TIMEOUT)


def test_in_place_op_on_the_moe_blocks_view_output_raises_and_fsdp_warning_is_silenced() -> None:
    spawn(training_scenarios.moe_block_view_is_guarded, 2, timeout=TIMEOUT)


def test_accumulated_micro_batches_give_the_gradients_and_step_of_one_batch() -> None:
    spawn(training_scenarios.accumulated_micro_batches_match_one_batch, 2, timeout=TIMEOUT)
