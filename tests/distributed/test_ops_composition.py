"""A model's own ops and the process's distributed kernels compose, or the conflict is refused (gloo, 2 ranks).

The path a training script takes: ``bind_ops(parallel_ops(state))`` for the process, then the model. Built
with ``ops=``, the model would run its own loss on every call, each rank's instead of the global batch's
(its rows ignore different numbers of labels, so the two differ); that is refused on every rank. Built
without, with its kernels passed as ``parallel_ops``'s base, it trains on the global batch's loss. A MoE
model running its own experts kernel cannot be sharded over expert ranks.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, Qwen3MoeConfig

from modelgraft.models.distributed import (
    ParallelConfigError,
    ParallelState,
    apply_expert_parallel,
    apply_fsdp,
    parallel_ops,
)
from modelgraft.models.distributed.launch import spawn
from modelgraft.models.loader import build_model
from modelgraft.models.ops import OpsConfig, bind_ops
from modelgraft.models.ops.errors import OpsConflictError
from modelgraft.models.testing import causal_lm_batch, seed_everything, tiny_config

TIMEOUT = 120.0
CHUNKED = OpsConfig({"causal_lm_loss": "chunked"})


def _llama(config: LlamaConfig, ops: OpsConfig | None = None) -> torch.nn.Module:
    seed_everything(0)
    return build_model(config, architecture="LlamaForCausalLM", ops=ops)


def dense_loss_is_the_global_batchs_or_refused() -> None:
    state = ParallelState.build(sp=1)
    config = tiny_config(LlamaConfig, use_cache=False)
    batch = causal_lm_batch(config, batch_size=4)
    batch["labels"][2:, :6] = -100  # rank 1's rows ignore more labels than rank 0's
    expected = _llama(config, CHUNKED)(**batch).loss  # one process, the whole batch
    rows = slice(2 * state.dp_rank, 2 * state.dp_rank + 2)
    mine = {key: value[rows] for key, value in batch.items()}

    bind_ops(parallel_ops(state, CHUNKED))
    with pytest.raises(OpsConflictError, match="causal_lm_loss=global_batch"):
        _llama(config, CHUNKED)

    model = apply_fsdp(_llama(config), state)
    loss = model(**mine).loss
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    local = _llama(config, None)  # the same weights, nothing distributed around it: the rank-local loss
    bind_ops(CHUNKED)
    assert not torch.allclose(local(**mine).loss, expected), "the batch does not tell the two losses apart"


def moe_with_its_own_experts_kernel_is_not_sharded() -> None:
    state = ParallelState.build(sp=1, ep=2)
    config = tiny_config(Qwen3MoeConfig, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=12)
    model = build_model(config, architecture="Qwen3MoeForCausalLM", ops=OpsConfig({"moe_experts": "grouped"}))
    with pytest.raises(ParallelConfigError, match=r"moe_experts=grouped.*attach_parallel"):
        apply_expert_parallel(model, state)


def test_a_dense_model_under_fsdp_trains_on_the_global_loss_or_its_own_ops_are_refused() -> None:
    spawn(dense_loss_is_the_global_batchs_or_refused, 2, timeout=TIMEOUT)


def test_a_moe_model_with_its_own_experts_kernel_refuses_expert_parallelism() -> None:
    spawn(moe_with_its_own_experts_kernel_is_not_sharded, 2, timeout=TIMEOUT)
