"""``parallelize(model, state, ops=...)`` equals one process: the loss of the global batch and every gradient
(gloo, 2 ranks), for a dense model under data parallelism and a MoE model under expert parallelism."""

from __future__ import annotations

from typing import Any

import torch
from transformers import LlamaConfig, Qwen3MoeConfig

from modelgraft.models import OpsConfig, bound_ops, build_model
from modelgraft.models.distributed import ParallelState, full_state, parallelize
from modelgraft.models.distributed.launch import spawn
from modelgraft.models.testing import causal_lm_batch, seed_everything, tiny_config

TIMEOUT = 120.0
RTOL, ATOL = 1e-4, 1e-5


def _compare(architecture: str, config: Any, ops: OpsConfig, state: ParallelState, **call: Any) -> None:
    batch = causal_lm_batch(config, batch_size=4)
    batch["labels"][2:, :5] = -100  # the ranks' rows ignore different numbers of labels
    seed_everything(0)
    reference = build_model(config, architecture=architecture)
    with bound_ops(ops):
        expected = reference(**batch, **call)
        expected.loss.backward()

    seed_everything(0)
    model = parallelize(build_model(config, architecture=architecture), state, ops=ops)
    rows = slice(2 * state.dp_rank, 2 * state.dp_rank + 2) if state.dp > 1 else slice(None)
    out = model(**{key: value[rows] for key, value in batch.items()}, **call)
    out.loss.backward()

    torch.testing.assert_close(out.loss, expected.loss, rtol=RTOL, atol=ATOL)
    grads = full_state(model, state, grads=True)
    for name, param in reference.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, rtol=RTOL, atol=ATOL, msg=lambda m, n=name: f"{n}: {m}")


def dense_under_data_parallelism() -> None:
    config = tiny_config(LlamaConfig, use_cache=False)
    _compare("LlamaForCausalLM", config, OpsConfig({"causal_lm_loss": "chunked"}), ParallelState.build())


def moe_under_expert_parallelism() -> None:
    config = tiny_config(
        Qwen3MoeConfig, use_cache=False, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=12
    )
    state = ParallelState.build(ep=2)
    _compare("Qwen3MoeForCausalLM", config, OpsConfig({"moe_experts": "grouped"}), state, output_router_logits=True)


def test_a_dense_model_parallelized_over_two_data_ranks_equals_one_process() -> None:
    spawn(dense_under_data_parallelism, 2, timeout=TIMEOUT)


def test_a_moe_model_parallelized_over_two_expert_ranks_equals_one_process() -> None:
    spawn(moe_under_expert_parallelism, 2, timeout=TIMEOUT)
