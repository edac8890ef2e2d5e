"""Op slots: the named hooks that generated modeling code consults before running upstream code.

A patched method reads ``if slot.use_non_eager_impl: return slot(...)`` and otherwise falls through to
the unchanged upstream body, so an unbound slot means upstream numerics. The slot names and call
contracts below are referenced verbatim by generated files; ``modelgraft.models.ops.kernels.eager`` holds the
reference implementation of each contract.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from modelgraft.models.ops.errors import UnboundSlotError

__all__ = [
    "SLOTS",
    "BoundKernel",
    "OpSlot",
    "activation_slot",
    "causal_conv1d_slot",
    "causal_conv1d_update_slot",
    "causal_lm_loss_slot",
    "chunk_gated_delta_rule_slot",
    "correction_bias_router_slot",
    "dsa_indexer_slot",
    "gated_mlp_slot",
    "glu_activation_slot",
    "group_limited_router_slot",
    "hash_router_slot",
    "hyper_connection_post_slot",
    "hyper_connection_slot",
    "hyper_head_slot",
    "layer_norm_slot",
    "lightning_indexer_slot",
    "load_balancing_loss_slot",
    "moe_experts_slot",
    "placeholder_features_slot",
    "recurrent_gated_delta_rule_slot",
    "rms_norm_gated_slot",
    "rms_norm_slot",
    "rope_slot",
    "rope_vision_slot",
    "sequence_classification_loss_slot",
    "sinkhorn_slot",
    "softmax_topk_router_slot",
    "topk_softmax_router_slot",
]


@dataclass(frozen=True)
class BoundKernel:
    """A kernel bound to a slot, with the name it was bound under (for reporting and restoring) and the options
    it was bound with (already applied to ``fn``; kept for code that asks how a slot is bound, such as a forward
    that needs the size of the process group a kernel runs over)."""

    name: str
    fn: Callable[..., Any]
    options: Mapping[str, Any] = field(default_factory=dict)


class OpSlot:
    """One replaceable operation; holds at most one non-eager kernel."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._bound: BoundKernel | None = None

    @property
    def use_non_eager_impl(self) -> bool:
        """True iff a non-eager kernel is bound; generated code calls the slot only then."""
        return self._bound is not None

    @property
    def bound(self) -> BoundKernel | None:
        """The current binding, or None when the upstream (eager) code path runs."""
        return self._bound

    @property
    def bound_kernel_name(self) -> str | None:
        """Name of the bound kernel, or None when unbound (eager)."""
        return None if self._bound is None else self._bound.name

    def bind(
        self, kernel: Callable[..., Any], name: str | None = None, options: Mapping[str, Any] | None = None
    ) -> None:
        """Route calls to ``kernel``; ``name`` defaults to its qualified name; ``options``: those ``kernel``
        was given (recorded only, see :class:`BoundKernel`)."""
        if not callable(kernel):
            raise TypeError(f"slot {self.name!r}: kernel must be callable, got {kernel!r}")
        if name is None:
            name = f"{getattr(kernel, '__module__', '?')}.{getattr(kernel, '__qualname__', repr(kernel))}"
        self._bound = BoundKernel(name=name, fn=kernel, options=dict(options or {}))

    def unbind(self) -> None:
        """Return to the upstream code path."""
        self._bound = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._bound is None:
            raise UnboundSlotError(
                f"slot {self.name!r} has no kernel bound; check `use_non_eager_impl` before calling it "
                "(unbound means the upstream code path runs)"
            )
        return self._bound.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"OpSlot({self.name!r}, bound={self.bound_kernel_name or 'eager'})"


_slots: dict[str, OpSlot] = {}


def _define(name: str) -> OpSlot:
    slot = OpSlot(name)
    _slots[name] = slot
    return slot


# Call contracts (see models.ops.kernels.eager for the reference semantics):
# rms_norm_slot(hidden_states, weight, eps, *, offset=0.0, cast_last=None) -> Tensor
#     cast_last None means offset != 0 (llama casts then scales; gemma and olmo2 scale in fp32, then cast)
rms_norm_slot = _define("rms_norm")
# activation_slot(hidden_states, activation) -> ACT2FN[activation](hidden_states): a plain MLP's activation
activation_slot = _define("activation")
# layer_norm_slot(hidden_states, normalized_shape, weight, bias, eps) -> F.layer_norm(...): an nn.LayerNorm call
layer_norm_slot = _define("layer_norm")
# glu_activation_slot(gate, up, activation) -> ACT2FN[activation](gate) * up
glu_activation_slot = _define("glu_activation")
# rope_slot(q, k, cos, sin, unsqueeze_dim=1, *, interleaved=False, repeat_cos=False, upcast=False, cast_back=False,
#           upcast_terms=False)
#     -> (q_embed, k_embed); partial rotary when cos covers fewer dims than q
rope_slot = _define("rope")
# rope_vision_slot(q, k, cos, sin) -> (q_embed, k_embed): a vision tower's rotary embedding (Qwen2-VL family);
#     q, k [seq, heads, head_dim], cos, sin [seq, head_dim], unsqueezed at dim -2; rotate-half in fp32, each result
#     cast back to its input's dtype. Also admits the one-tensor form rope_vision_slot(tensor, freqs) -> tensor:
#     tensor [..., seq, heads, head_dim], freqs [seq, head_dim // 2] the angles (cos/sin of cat(freqs, freqs)).
rope_vision_slot = _define("rope_vision")
# causal_lm_loss_slot(hidden_states, lm_head_weight, labels, *, vocab_size, num_items_in_batch=None,
#                     ignore_index=-100, shift_labels=None, final_logit_softcapping=None, lm_head_bias=None,
#                     softcap_in_fp32=False, **kwargs)
#     -> (loss, logits or None); softcap_in_fp32: the logits are upcast to fp32 before the soft-cap and returned
#     in fp32 (beam), where the default caps in the model dtype (gemma)
causal_lm_loss_slot = _define("causal_lm_loss")
# sequence_classification_loss_slot(logits, labels, pooled_logits, config) -> loss
sequence_classification_loss_slot = _define("sequence_classification_loss")
# moe_experts_slot(hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, activation, *,
#                  layout="fused", interleaved=False, gate_up_bias=None, down_bias=None, limit=None, alpha=None,
#                  activation_first=False)
#     -> Tensor [tokens, hidden]. Keyword-only options, every default being the original contract:
#     layout "fused": gate_up_proj [E, 2I, H], down_proj [E, H, I] (F.linear); "transposed": [E, H, 2I], [E, I, H]
#         (x @ W[e], gpt_oss). Said by the caller, never guessed from shapes (ambiguous when H == 2I or H == I).
#     interleaved: gate/up are the even/odd columns of the 2I axis (gpt_oss); default gate-first halves.
#     gate_up_bias [E, 2I] (same column order), down_bias [E, H]: added after each matmul.
#     limit: clamped SwiGLU, ACT(gate.clamp(max=limit)) * up.clamp(-limit, limit) (deepseek_v4);
#     limit + alpha: gpt_oss's, g = gate.clamp(max=limit); (up.clamp(-limit, limit) + 1) * g * sigmoid(alpha * g).
#     activation_first (+ limit): Step-3.7's, ACT(gate).clamp(max=limit) * up.clamp(-limit, limit); no clamp
#         where limit is None.
moe_experts_slot = _define("moe_experts")
# load_balancing_loss_slot(router_logits, num_experts, top_k, attention_mask) -> Tensor, or the int 0 without logits
#     attention_mask: None, [batch, seq], or a 4-D mask / dict of them by attention type (its real tokens)
load_balancing_loss_slot = _define("load_balancing_loss")
# hyper_connection_slot(hidden_streams, fn, base, scale, *, hc_mult, eps, norm_eps)
#     -> (pre [B, S, n], post [B, S, n], comb_logits [B, S, n, n]): the mHC mapping of n = hc_mult residual
#     streams [B, S, n, D] (DeepSeek-V4). In fp32: x = unweighted RMSNorm(streams.flatten(2)) (norm_eps);
#     (pre, post, comb) logits = x @ fn.T split [n, n, n*n], each times its scale[i] plus its slice of base;
#     pre = sigmoid + eps, post = 2 * sigmoid; the comb logits go on to the sinkhorn slot.
hyper_connection_slot = _define("hyper_connection")
# sinkhorn_slot(logits [..., n, n], iters, eps) -> comb: softmax over the last axis + eps, then one column
#     normalisation, then iters - 1 rounds of row and column normalisation, each dividing by (sum + eps).
sinkhorn_slot = _define("sinkhorn")
# hyper_connection_post_slot(output [B, S, D], hidden_streams [B, S, n, D], post, comb) -> [B, S, n, D]:
#     post[..., n, None] * output[..., None, :] + comb^T @ hidden_streams, post and comb cast to the streams' dtype.
hyper_connection_post_slot = _define("hyper_connection_post")
# hyper_head_slot(hidden_streams, fn, base, scale, *, eps, norm_eps) -> [B, S, D]: the final collapse of the
#     streams, weights sigmoid(unweighted RMSNorm(streams.flatten(2)) @ fn.T * scale + base) + eps, in fp32.
hyper_head_slot = _define("hyper_head")
# hash_router_slot(hidden_states, weight, tid2eid, input_ids, *, scoring_func, routed_scaling_factor)
#     -> (router_logits [T, E], weights [T, K], indices [T, K]): experts chosen by the frozen token-id table
#     tid2eid [V, K]; weights = ACT2FN[scoring_func](logits) at those experts, normalised (sum + 1e-20), scaled.
hash_router_slot = _define("hash_router")
# correction_bias_router_slot(hidden_states, weight, e_score_correction_bias, *, top_k, scoring_func,
#                             routed_scaling_factor) -> (router_logits [T, E], weights [T, K], indices [T, K]):
#     scores = ACT2FN[scoring_func](logits); experts = top-k of scores + bias (unsorted); weights = their
#     scores, normalised (sum + 1e-20), scaled (DeepSeek-V4's top-k router: no expert groups).
correction_bias_router_slot = _define("correction_bias_router")
# lightning_indexer_slot(q [B, S, h, d], compressed_kv [B, T, d], hidden_states [B, S, D], weights_proj [h, D], *,
#                        softmax_scale, weights_scaling) -> index scores [B, S, T], in fp32:
#     sum_h (hidden_states @ weights_proj.T * weights_scaling)[h] * relu(q[h] . k) * softmax_scale.
lightning_indexer_slot = _define("lightning_indexer")
# dsa_indexer_slot(q [B, S, h, d], k [B, T, d], hidden_states [B, S, D], weights_proj [h, D], attention_mask,
#                  position_ids [B, S], *, softmax_scale, weights_scaling, index_topk)
#     -> int32 key indices [B, S, min(index_topk, T)]: DeepSeek sparse attention's top-k selection (GLM-MoE-DSA).
#     In fp32: relu(q[h] . k * softmax_scale), weighted by (hidden_states cast to weights_proj's dtype) @
#     weights_proj.T * weights_scaling and reduced over heads by a matmul; plus the additive attention_mask
#     [B, S, T], or where it is None -inf at keys after position_ids; then torch.topk's indices.
dsa_indexer_slot = _define("dsa_indexer")
# group_limited_router_slot(hidden_states, weight, e_score_correction_bias, *, top_k, n_group, topk_group,
#                           norm_topk_prob, routed_scaling_factor)
#     -> (router_logits [T, E], weights [T, K], indices [T, K]), logits and weights in fp32 (DeepSeek-V3, GLM-MoE-DSA):
#     logits = fp32 hidden_states @ fp32 weight.T; scores = sigmoid(logits); biased = scores + bias; each of the
#     n_group groups of E / n_group experts is ranked by the sum of its top-2 biased scores, experts outside the
#     topk_group best groups are masked to -inf, and indices = top-k of the biased scores (unsorted); weights =
#     the unbiased scores there, divided by (their sum + 1e-20) when norm_topk_prob, times routed_scaling_factor.
group_limited_router_slot = _define("group_limited_router")
# gated_mlp_slot(x, gate_weight, up_weight, down_weight, activation, *, gate_bias=None, up_bias=None, down_bias=None)
#     -> down(ACT2FN[activation](gate(x)) * up(x)), each projection F.linear(., weight, bias): a whole gated MLP
#     (DeepSeek-V3's dense layers and shared experts), for kernels that fuse the projections, not just the GLU.
gated_mlp_slot = _define("gated_mlp")
# softmax_topk_router_slot(hidden_states, weight, *, top_k, norm_topk_prob, upcast="dtype_arg", cast_back=True)
#     -> (router_logits [T, E], weights [T, K], indices [T, K]) (Qwen2/3-MoE, OLMoE, Qwen3-Next, Mixtral, ...):
#     logits = F.linear(hidden_states.reshape(-1, H), weight) in the input's dtype; probs = softmax(logits) in fp32,
#     reached as softmax(logits, dtype=torch.float) ("dtype_arg", Qwen) or softmax(logits.float()) ("float_call",
#     Mixtral/MiniMax); weights, indices = torch.topk(probs, top_k) (sorted); weights divided in place by their
#     sum (no epsilon) when norm_topk_prob (the literal True for routers that always renormalise: Mixtral,
#     Qwen3.5-MoE, Qwen3-VL-MoE); weights cast to the logits' dtype when cast_back, else left fp32 (Mixtral).
softmax_topk_router_slot = _define("softmax_topk_router")
# topk_softmax_router_slot(hidden_states [T, H], weight, bias, *, top_k)
#     -> (router_logits [T, E], weights [T, K], indices [T, K]) (gpt_oss): logits = F.linear(hidden_states, weight,
#     bias); top values, indices = torch.topk(logits, top_k) (sorted); weights = softmax over those K values, in
#     their own dtype (no upcast).
topk_softmax_router_slot = _define("topk_softmax_router")

# rms_norm_gated_slot(hidden_states, gate, weight, eps, *, activation="silu") -> Tensor: a gated RMSNorm
#     (Qwen3.5's linear attention output norm): in fp32, x * rsqrt(mean(x^2) + eps) cast to the input dtype, times
#     weight, times ACT2FN[activation](gate in fp32); the result cast to the input dtype.
rms_norm_gated_slot = _define("rms_norm_gated")
# causal_conv1d_slot(hidden_states [B, C, T], weight [C, K], bias [C] or None, activation, *, cu_seqlens=None)
#     -> [B, C, T]: depthwise causal conv1d (K - 1 zeros of left padding) in weight's dtype, then ACT2FN[activation]
#     when activation is not None, cast to the input's dtype. cu_seqlens (int [N + 1], packed documents of a batch
#     of one) is upstream's forward's cu_seq_lens_q; upstream's torch path ignores it, a kernel may honour it.
causal_conv1d_slot = _define("causal_conv1d")
# causal_conv1d_update_slot(hidden_states [B, C, T], conv_state [B, C, S], weight [C, K], bias, activation)
#     -> [B, C, T]: one decode step of the causal conv1d over cat(conv_state, hidden_states); conv_state is updated
#     in place to the last S inputs (the cache's state).
causal_conv1d_update_slot = _define("causal_conv1d_update")
# chunk_gated_delta_rule_slot(query, key, value, g, beta, *, chunk_size=64, initial_state=None,
#                             output_final_state=False, use_qk_l2norm_in_kernel=False, cu_seqlens=None)
#     -> (out [B, T, H, V] in the query's dtype, final state [B, H, K, V] fp32 or None): the gated delta rule over
#     q, k [B, T, Hk, K], v [B, T, H, V], g (log decay) and beta [B, T, H]. Grouped value attention: H is a
#     multiple of Hk and each q/k head serves H / Hk consecutive value heads (the kernel repeats q and k with
#     repeat_interleave on the head axis, as upstream's function does since its mixer stopped repeating them).
#     All in fp32: inputs cast first, then q and k L2-normalised (eps 1e-6) when use_qk_l2norm_in_kernel, then
#     queries scaled by K ** -0.5. cu_seqlens as for causal_conv1d (upstream's torch path ignores it; the
#     chunked_delta kernel runs each document from its own state, the initial states then [N, H, K, V]).
chunk_gated_delta_rule_slot = _define("chunk_gated_delta_rule")
# recurrent_gated_delta_rule_slot(query, key, value, g, beta, *, initial_state, output_final_state,
#                                 use_qk_l2norm_in_kernel=False, cu_seqlens=None) -> (out, final state or None):
#     the same recurrence token by token, on the same shapes and grouping (upstream calls it for one-token cached
#     decode steps, and for the last tokens of a call whose intermediate states a cache recording its past keeps).
recurrent_gated_delta_rule_slot = _define("recurrent_gated_delta_rule")

#: Every slot by name, in definition order.
SLOTS: Mapping[str, OpSlot] = MappingProxyType(_slots)

# placeholder_features_slot(mask [B, S] or [B, S, 1] bool, features [N, ...]) -> features [n, ...]: the features of
#     the placeholders this process holds. ``features`` are a tower's outputs for every placeholder of the batch,
#     in the order of the whole batch's flattened [B, S] positions; ``mask`` marks the placeholders of this
#     process's positions. With one process holding every position (the reference), that is ``features`` itself;
#     under sequence parallelism, the rows of the placeholders in this rank's slice (VLM and Omni forwards).
placeholder_features_slot = _define("placeholder_features")
