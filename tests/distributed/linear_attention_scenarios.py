"""What each rank runs in the hybrid linear-attention tests: Qwen3.5 under Ulysses sequence parallelism (its
Gated DeltaNet layers through the ``sp_linear`` kernels) and Qwen3.5-MoE under expert parallelism, each against
one process built from the same seed on every rank (``scenarios``' helpers and tolerances)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from transformers import PreTrainedConfig, Qwen3_5MoeConfig, Qwen3_5MoeTextConfig, Qwen3_5TextConfig

from modelgraft.models.distributed import (
    ParallelState,
    PeerFailedError,
    apply_expert_parallel,
    attach_parallel,
    average_gradients,
    full_state,
    gather_sequence,
    linear_attention,
    parallel_ops,
    register_ulysses,
    shard_sequence,
)
from modelgraft.models.loader import get_model_class
from modelgraft.models.ops import OpsConfig, bind_ops, unbind_ops
from modelgraft.models.ops.kernels import eager
from modelgraft.models.testing import causal_lm_batch, seed_everything, tiny_config

from .scenarios import GROUPED, assert_close, assert_same_grads, ops, rows_of

#: On the tiny sizes (hidden 48, 6 heads of 16, kv 2): a Gated DeltaNet layer then a full-attention one, 2 key
#: heads repeated to 4 value heads (2 per sp rank), upstream's width-4 conv (a 3-token halo across a boundary).
HYBRID: dict[str, Any] = {
    "num_hidden_layers": 2,
    "layer_types": ["linear_attention", "full_attention"],
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 12,
    "use_cache": False,
}
#: 8 experts, so they split over 2 ranks, a shared expert, and a non-default aux-loss coefficient.
MOE: dict[str, Any] = {
    **HYBRID,
    "num_experts": 8,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 28,
    "shared_expert_intermediate_size": 20,
    "router_aux_loss_coef": 0.25,
}
#: Text-only batches never run the vision tower: the smallest one the config accepts, projecting to hidden 48.
VISION: dict[str, Any] = {
    "depth": 1,
    "hidden_size": 16,
    "num_heads": 2,
    "intermediate_size": 24,
    "out_hidden_size": 48,
}
CHUNKED_DELTA = OpsConfig({"causal_conv1d": "chunked_delta", "chunk_gated_delta_rule": "chunked_delta"})


def _text_model(attention: str) -> tuple[PreTrainedConfig, torch.nn.Module]:
    config = tiny_config(Qwen3_5TextConfig, **HYBRID, attn_implementation=attention)
    seed_everything(0)
    return config, get_model_class("qwen3_5", "Qwen3_5ForCausalLM")(config)


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()}


def _linear_grads_nonzero(grads: dict[str, torch.Tensor]) -> None:
    """The mixer's conv and decay parameters got a gradient: the sp_linear path was on the graph."""
    for name in ("linear_attn.conv1d.weight", "linear_attn.A_log", "linear_attn.in_proj_a.weight"):
        assert grads[f"model.layers.0.{name}"].abs().sum() > 0, name


def sp2_hybrid_matches_one_process() -> None:
    """SP=2 on qwen3_5's text model (ulysses_sdpa + sp_linear): logits at real tokens, loss and every gradient
    equal to one process; 11 positions padded to 12, so rank 1's conv reads a 3-token halo of rank 0's."""
    state = ParallelState.build(sp=2)
    register_ulysses(state)
    config, reference = _text_model("sdpa")
    batch = causal_lm_batch(config, seq_len=11)
    ref_out = reference(**batch)
    ref_out.loss.backward()

    _, model = _text_model("ulysses_sdpa")
    bind_ops(parallel_ops(state))
    out = model(**shard_sequence(batch, state, pad_token_id=config.pad_token_id))
    real = batch["attention_mask"].bool()
    assert_close(gather_sequence(out.logits, state, length=11)[real], ref_out.logits[real], "gathered logits")
    assert_close(out.loss, ref_out.loss, "loss")
    out.loss.backward()
    average_gradients(model, state)
    grads = full_state(model, state, grads=True)
    assert_same_grads(grads, _grads(reference))
    _linear_grads_nonzero(grads)
    with pytest.raises(NotImplementedError, match="without a cache"):
        model(**shard_sequence(batch, state, pad_token_id=config.pad_token_id), use_cache=True)
    unbind_ops()


def _packed_batch(config: PreTrainedConfig) -> dict[str, torch.Tensor]:
    """One row of four documents, [0, 4) [4, 6) [6, 9) [9, 11): with sp=2 (6 positions a rank) one boundary
    falls inside rank 1's conv halo, one on its slice start and one inside its slice."""
    batch = causal_lm_batch(config, batch_size=1, seq_len=11)
    del batch["attention_mask"]
    bounds = [0, 4, 6, 9, 11]
    batch["position_ids"] = torch.cat([torch.arange(b - a) for a, b in itertools.pairwise(bounds)])[None]
    batch["cu_seq_lens_q"] = torch.tensor(bounds, dtype=torch.int32)
    return batch


def sp2_packed_documents_match_one_process() -> None:
    """Packed documents (position ids that restart, cu_seq_lens_q) with chunked_delta inside sp_linear: each
    document kept apart in the linear layers as one process keeps them; attention through attach_parallel."""
    state = ParallelState.build(sp=2)
    config, reference = _text_model("sdpa")
    batch = _packed_batch(config)
    with ops(CHUNKED_DELTA):
        ref_out = reference(**batch)
        ref_out.loss.backward()

    _, model = _text_model("sdpa")
    attach_parallel(model, state, CHUNKED_DELTA)
    out = model(**shard_sequence(batch, state, pad_token_id=config.pad_token_id, packed=True))
    assert_close(gather_sequence(out.logits, state, length=11), ref_out.logits, "gathered logits")
    assert_close(out.loss, ref_out.loss, "loss")
    out.loss.backward()
    average_gradients(model, state)
    assert_same_grads(full_state(model, state, grads=True), _grads(reference))

    # Boundaries of this rank's slice instead of the whole sequence's: refused on every rank, before any exchange.
    local = shard_sequence({**batch, "cu_seq_lens_q": torch.tensor([0, 4, 6, 9, 11, 13])}, state, packed=True)
    with pytest.raises(ValueError, match="reach past the whole sequence"):
        model(**local)


def ep2_moe_matches_one_process() -> None:
    """EP=2 on qwen3_5_moe's conditional-generation model (text only, its plan's experts split 4 + 4), each rank
    its own rows: logits, aux loss, loss and every gradient equal to one process with grouped experts."""
    state = ParallelState.build(ep=2)
    text = tiny_config(Qwen3_5MoeTextConfig, **MOE).to_dict()
    config = tiny_config(Qwen3_5MoeConfig, text_config=text, vision_config=VISION)
    assert config.text_config.hidden_size == 48 and config.text_config.vocab_size == 131
    cls = get_model_class("qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration")
    batch = causal_lm_batch(config, batch_size=4)
    kwargs = {"output_router_logits": True}
    seed_everything(0)
    reference = cls(config)
    with ops(GROUPED):
        ref_out = reference(**batch, **kwargs)
        ref_out.loss.backward()

    seed_everything(0)
    model = cls(config)
    shards = apply_expert_parallel(model, state)
    assert shards and all(shard.global_shape[0] == 8 for shard in shards.values())
    bind_ops(parallel_ops(state, GROUPED))
    local = rows_of(batch, state.rank, state.world_size)
    out = model(**local, **kwargs)
    assert_close(out.logits, ref_out.logits[state.rank * 2 : state.rank * 2 + 2], "logits")
    assert_close(out.aux_loss, ref_out.aux_loss, "aux loss")
    assert_close(out.loss, ref_out.loss, "loss")
    out.loss.backward()
    average_gradients(model, state)
    assert_same_grads(full_state(model, state, grads=True), _grads(reference))
    unbind_ops()


def conv_halo_spanning_a_whole_slice() -> None:
    """The conv alone with slices shorter than its halo (2 positions a rank, width 4): rank 1 reads all of rank
    0's slice and zeros before it, forward and backward equal to the whole sequence's conv."""
    state = ParallelState.build(sp=2)
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 4, generator=generator, requires_grad=True)
    weight = torch.randn(5, 4, generator=generator, requires_grad=True)
    bias = torch.randn(5, generator=generator, requires_grad=True)
    probe = torch.randn(2, 5, 4, generator=generator)
    expected = eager.causal_conv1d(x, weight, bias, "silu")
    (expected * probe).sum().backward()
    window = slice(state.sp_rank * 2, state.sp_rank * 2 + 2)
    local = x.detach()[..., window].clone().requires_grad_()
    local_weight, local_bias = (t.detach().clone().requires_grad_() for t in (weight, bias))
    out = linear_attention.causal_conv1d(local, local_weight, local_bias, "silu", group=state.sp_group)
    assert_close(out, expected.detach()[..., window], "conv output")
    (out * probe[..., window]).sum().backward()
    assert_close(local.grad, x.grad[..., window], "input gradient")
    for what, grad, whole in (("weight", local_weight.grad, weight.grad), ("bias", local_bias.grad, bias.grad)):
        torch.distributed.all_reduce(grad, group=state.sp_group)  # each rank's share of the sequence's gradient
        assert_close(grad, whole, f"{what} gradient summed over the ranks")


def boundaries_wrong_on_one_rank_stop_both() -> None:
    """cu_seqlens that only rank 1 cannot use: rank 1 raises its error, rank 0 PeerFailedError, before the halo."""
    state = ParallelState.build(sp=2)
    x, weight = torch.zeros(1, 5, 6), torch.zeros(5, 4)
    bounds = torch.tensor([0, 4, 12] if state.sp_rank == 0 else [0, 4, 13])
    expected = ValueError if state.sp_rank == 1 else PeerFailedError
    with pytest.raises(expected, match="reach past the whole sequence"):
        linear_attention.causal_conv1d(x, weight, None, None, cu_seqlens=bounds, group=state.sp_group)


def two_rank_hybrid_cases() -> None:
    """One start of two ranks for all of them (starting ranks is the slow part on 2 cores)."""
    conv_halo_spanning_a_whole_slice()
    boundaries_wrong_on_one_rank_stop_both()
    sp2_hybrid_matches_one_process()
    sp2_packed_documents_match_one_process()
    ep2_moe_matches_one_process()
