"""Parallel settings scoped to a model: models with different settings, or none, in one process (gloo, 2 ranks).

``attach_parallel(model, state)`` binds the model's kernels around its own calls and names a Ulysses
implementation registered for its state alone, so nothing process-wide changes: a plain model next to a
sharded one runs eager kernels on its whole batch (an unsharded MoE model must not send its tokens to the
ep ranks), and a process-wide ``register_ulysses`` of another state does not rebind the sharded model.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import LlamaConfig, PreTrainedConfig, Qwen3MoeConfig

from modelgraft.models.distributed import (
    ParallelState,
    apply_expert_parallel,
    average_gradients,
    full_state,
    gather_sequence,
    register_ulysses,
    shard_sequence,
)
from modelgraft.models.distributed.launch import spawn
from modelgraft.models.distributed.scope import attach_parallel
from modelgraft.models.loader import build_model
from modelgraft.models.ops import OpsConfig, bound_ops, current_ops
from modelgraft.models.testing import causal_lm_batch, seed_everything, tiny_config

TIMEOUT = 150.0
RTOL, ATOL = 1e-4, 1e-5
GROUPED = OpsConfig({"moe_experts": "grouped"})
MOE_SIZES: dict[str, Any] = {
    "num_experts": 8,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 28,
    "mlp_only_layers": [1],
    "norm_topk_prob": True,
    "router_aux_loss_coef": 0.25,
    "experts_implementation": "eager",
}
ROUTER = {"output_router_logits": True}


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


def _moe(config: PreTrainedConfig) -> torch.nn.Module:
    seed_everything(0)
    return build_model(config, architecture="Qwen3MoeForCausalLM")


def _llama(config: PreTrainedConfig) -> torch.nn.Module:
    seed_everything(0)
    return build_model(config, architecture="LlamaForCausalLM")


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: param.grad.detach().clone() for name, param in model.named_parameters()}


def _same_grads(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], model: str) -> None:
    assert actual.keys() == expected.keys()
    for name, grad in expected.items():
        _close(actual[name], grad, f"{model}: gradient of {name}")


def models_keep_their_own_parallel_settings() -> None:
    sp_ep = ParallelState.build(sp=2, ep=2)  # both ranks: the same rows, a slice each, half the experts each
    dp = ParallelState.build(sp=1)  # each rank: its own rows, whole sequences
    moe_config = tiny_config(Qwen3MoeConfig, use_cache=False, attn_implementation="sdpa", **MOE_SIZES)
    llama_config = tiny_config(LlamaConfig, use_cache=False, attn_implementation="sdpa")
    batch = causal_lm_batch(moe_config, seq_len=11)
    rows = slice(2 * dp.dp_rank, 2 * dp.dp_rank + 2)

    # One process, whole batch.
    moe_reference = _moe(moe_config)
    with bound_ops(GROUPED):
        moe_expected = moe_reference(**batch, **ROUTER)
        moe_expected.loss.backward()
    llama_reference = _llama(llama_config)
    llama_expected = llama_reference(**batch)
    llama_expected.loss.backward()

    sharded = _moe(moe_config)
    apply_expert_parallel(sharded, sp_ep)
    attach_parallel(sharded, sp_ep, GROUPED)
    data_parallel = attach_parallel(_llama(llama_config), dp)
    plain = _moe(moe_config)  # an eval copy next to the sharded model: no parallel settings at all
    register_ulysses(dp)  # process-wide names bound to another state: the sharded model must not follow them
    assert sharded.config._attn_implementation.startswith("ulysses_sdpa@")
    assert data_parallel.config._attn_implementation == "sdpa"  # sp=1: nothing to exchange

    # Forwards interleaved, then backwards: each model runs its own kernels and groups.
    sharded_out = sharded(**shard_sequence(batch, sp_ep), **ROUTER)
    plain_out = plain(**batch, **ROUTER)
    dp_out = data_parallel(**shard_sequence({key: value[rows] for key, value in batch.items()}, dp))
    assert current_ops() == {}, "a model's kernels stayed bound after its call"

    real = batch["attention_mask"].bool()  # a padding query's logits are unspecified under sp (no padding mask)
    logits = gather_sequence(sharded_out.logits, sp_ep, length=11)
    _close(logits[real], moe_expected.logits[real], "sp x ep logits of real tokens")
    _close(sharded_out.aux_loss, moe_expected.aux_loss, "sp x ep aux loss")
    _close(sharded_out.loss, moe_expected.loss, "sp x ep loss")
    # The plain model: every expert local, its own whole batch, no all-reduced loss.
    _close(plain_out.logits, moe_expected.logits, "plain logits")
    _close(plain_out.aux_loss, moe_expected.aux_loss, "plain aux loss")
    _close(plain_out.loss, moe_expected.loss, "plain loss")
    _close(dp_out.loss, llama_expected.loss, "dp loss of the global batch")

    plain_out.loss.backward()
    sharded_out.loss.backward()
    dp_out.loss.backward()
    _same_grads(_grads(plain), _grads(moe_reference), "plain")
    average_gradients(sharded, sp_ep)
    _same_grads(full_state(sharded, sp_ep, grads=True), _grads(moe_reference), "sp x ep")
    average_gradients(data_parallel, dp)
    _same_grads(_grads(data_parallel), _grads(llama_reference), "dp")


def test_a_sharded_a_plain_and_a_data_parallel_model_in_one_process_each_match_one_process() -> None:
    spawn(models_keep_their_own_parallel_settings, 2, timeout=TIMEOUT)
