"""Reference implementation of every slot contract, in plain torch with HF's numerics.

These are the semantic spec the other kernels are tested against; binding "eager" does not bind them
(an unbound slot runs the upstream code itself), but they are bindable like any kernel for tests.
The ones :data:`UNTRACEABLE` names cannot be traced by ``torch.compile`` into one graph; every one a
decoder layer of the zoo calls is checked to trace (tests/compile, docs/compile.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# The linear-attention slots (Qwen3.5's Gated DeltaNet) have their references in a module of their own.
from modelgraft.models.ops.kernels.linear_attention_reference import (  # noqa: F401 (re-exported references)
    causal_conv1d,
    causal_conv1d_update,
    chunk_gated_delta_rule,
    recurrent_gated_delta_rule,
    rms_norm_gated,
)
from modelgraft.models.ops.kernels.loss_inputs import divide_by_num_items, shift_causal_labels
from modelgraft.models.ops.kernels.token_mask import real_token_mask

#: The references that ``torch.compile`` cannot trace into one graph, by slot, with the reason (docs/compile.md).
#: Each reads data on the host to decide what to compute; they are the specification, written as upstream
#: writes it, so they stay that way. A compiled model leaves these slots unbound or binds a traceable kernel
#: (``grouped`` for the experts); tests/compile checks that each one named here does break the graph.
#: ``placeholder_features`` is called by VLM and Omni forwards, outside the decoder layers.
UNTRACEABLE: Mapping[str, str] = MappingProxyType(
    {
        "moe_experts": (
            "upstream's per-expert loop: the experts with rows and each one's rows come from nonzero / where on "
            "the routing, shapes that depend on the data (a graph break per visited expert)"
        ),
        "placeholder_features": "checks the placeholder count against the features with int(mask.sum()), a host read",
    }
)


def rms_norm(
    hidden_states: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    *,
    offset: float = 0.0,
    cast_last: bool | None = None,
) -> torch.Tensor:
    """RMSNorm over the last dim, normalized in fp32.

    ``cast_last`` False (the default for ``offset == 0``) follows Llama: cast the normalized input back,
    then scale by ``weight``. True (the default otherwise) scales by ``offset + weight`` in fp32 and casts
    last: Gemma's formulation with ``offset=1``, OLMo-2's with ``offset=0``. ``weight`` None is an
    unweighted norm: with ``cast_last`` normalized in fp32, then cast back (nanochat); without, the fp32
    scale factor is cast to the input dtype and multiplies the input there (DeepSeek-V4).
    """
    if cast_last is None:
        cast_last = offset != 0.0
    input_dtype = hidden_states.dtype
    x = hidden_states.to(torch.float32)
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if weight is None:
        if not cast_last:
            return hidden_states * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps).to(input_dtype)
        return normed.to(input_dtype)
    if not cast_last:
        return (weight + offset if offset else weight) * normed.to(input_dtype)
    return (normed * (offset + weight.float())).to(input_dtype)


@cache
def activation_module(name: str) -> nn.Module:
    """transformers' ``ACT2FN`` module for the ``hidden_act`` name ``name``, one per name: ``ACT2FN`` builds a new
    module at every lookup, and the same one each time is what lets a compiled graph keep it."""
    from transformers.activations import ACT2FN

    return ACT2FN[name]


def layer_norm(
    hidden_states: torch.Tensor,
    normalized_shape: tuple[int, ...],
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> torch.Tensor:
    """``nn.LayerNorm``'s computation from the module's own shape, weight, bias and eps."""
    return F.layer_norm(hidden_states, normalized_shape, weight, bias, eps)


def activation(hidden_states: torch.Tensor, activation: str) -> torch.Tensor:
    """``ACT(hidden_states)`` with ``activation`` an HF ``hidden_act`` name: a plain MLP's activation."""
    return activation_module(activation)(hidden_states)


def glu_activation(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """``ACT(gate) * up`` with ``activation`` an HF ``hidden_act`` name."""
    return activation_module(activation)(gate) * up


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def rope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int = 1,
    *,
    interleaved: bool = False,
    repeat_cos: bool = False,
    upcast: bool = False,
    cast_back: bool = False,
    upcast_terms: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary embedding of q and k, HF ``apply_rotary_pos_emb`` layout (cos/sin unsqueezed at ``unsqueeze_dim``).

    The defaults are llama's rotate-half. ``interleaved`` rotates even/odd pairs instead of halves, and
    ``repeat_cos`` first repeats the first half of cos/sin pairwise (helium, glm); ``upcast`` rotates in fp32
    and casts back (cohere); ``upcast_terms`` rotates in q's dtype and upcasts each term (ernie4_5: the same
    values, but the gradient is rounded per term as upstream's is); ``cast_back`` casts the result to q's
    and k's dtypes (olmo). When cos
    covers fewer dims than q (partial rotary: gpt_neox, glm), the rest of q and k passes through unrotated.
    """
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    if repeat_cos:
        cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
        sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
    rotate = _rotate_pairs if interleaved else _rotate_half
    rotary_dim = cos.shape[-1]

    def embed(x: torch.Tensor) -> torch.Tensor:
        if upcast_terms and rotary_dim == x.shape[-1]:
            return (x.float() * cos + rotate(x).float() * sin).to(x.dtype)
        if rotary_dim == x.shape[-1]:
            rotated = x.float() if upcast else x
            out = rotated * cos + rotate(rotated) * sin
        else:
            part = x[..., :rotary_dim].float() if upcast else x[..., :rotary_dim]
            out = torch.cat([part * cos + rotate(part) * sin, x[..., rotary_dim:]], dim=-1)
        return out.to(x.dtype) if upcast or cast_back else out

    return embed(q), embed(k)


def rope_vision(*args: torch.Tensor) -> Any:
    """A vision tower's rotary embedding, Qwen2-VL's ``apply_rotary_pos_emb_vision``: rotate-half in fp32, cast back.

    ``(q, k, cos, sin)`` with cos/sin ``[seq, head_dim]`` unsqueezed at dim -2 returns ``(q_embed, k_embed)``
    (transformers 5.x). ``(tensor, freqs)`` with the angles ``freqs [seq, head_dim // 2]`` returns the rotated
    tensor (the one-tensor form of earlier Qwen2-VL releases, and of Qwen2.5-Omni's vision tower): cos and sin of
    ``cat(freqs, freqs)``, which is what that form's ``repeat(1, 1, 2)`` of the unsqueezed angles builds, taken in
    the angles' own dtype before the fp32 rotation, as upstream takes them (bf16 angles in a bf16 model).
    """
    if len(args) == 2:
        tensor, freqs = args
        angles = torch.cat((freqs, freqs), dim=-1)
        return _rotate_vision(tensor, angles.cos(), angles.sin())
    if len(args) != 4:
        raise TypeError(f"rope_vision takes (q, k, cos, sin) or (tensor, freqs), got {len(args)} arguments")
    q, k, cos, sin = args
    return _rotate_vision(q, cos, sin), _rotate_vision(k, cos, sin)


def _rotate_vision(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    cos, sin = cos.unsqueeze(-2).float(), sin.unsqueeze(-2).float()
    rotated = x.float()
    return ((rotated * cos) + (_rotate_half(rotated) * sin)).to(x.dtype)


def softcap_logits(logits: torch.Tensor, cap: float | None) -> torch.Tensor:
    """Gemma-style final-logit soft-capping, ``tanh(logits / cap) * cap``; identity when ``cap`` is None."""
    if cap is None:
        return logits
    return torch.tanh(logits / cap) * cap


def causal_lm_loss(
    hidden_states: torch.Tensor,
    lm_head_weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    vocab_size: int,
    num_items_in_batch: Any = None,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    final_logit_softcapping: float | None = None,
    lm_head_bias: torch.Tensor | None = None,
    softcap_in_fp32: bool = False,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token cross entropy from hidden states; materializes the logits and returns them too.

    ``hidden_states`` are already sliced to the kept positions; ``labels`` are unshifted unless
    ``shift_labels`` is given. Logits are soft-capped in the model dtype (in fp32, and returned in fp32, with
    ``softcap_in_fp32``) and upcast to fp32 for the loss,
    which is the mean over non-ignored targets, or their sum / ``num_items_in_batch`` when given.
    ``lm_head_bias`` is the bias of an lm_head that has one (phi, codegen). Extra ``kwargs`` (model forward kwargs passed along by generated code) are ignored, as upstream does.
    """
    logits = F.linear(hidden_states, lm_head_weight, lm_head_bias)
    if softcap_in_fp32 and final_logit_softcapping is not None:
        logits = logits.float()
    logits = softcap_logits(logits, final_logit_softcapping)
    if shift_labels is None:
        shift_labels = shift_causal_labels(labels, ignore_index)
    flat_logits = logits.float().reshape(-1, vocab_size)
    targets = shift_labels.reshape(-1).to(flat_logits.device)
    if num_items_in_batch is None:
        return F.cross_entropy(flat_logits, targets, ignore_index=ignore_index), logits
    summed = F.cross_entropy(flat_logits, targets, ignore_index=ignore_index, reduction="sum")
    return divide_by_num_items(summed, num_items_in_batch), logits


def sequence_classification_loss(
    logits: torch.Tensor, labels: torch.Tensor, pooled_logits: torch.Tensor, config: Any
) -> torch.Tensor:
    """Loss of a sequence classifier, by ``config.problem_type``; infers and stores it when unset, like HF."""
    num_labels = config.num_labels
    if config.problem_type is None:
        if num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"

    labels = labels.to(pooled_logits.device)
    if config.problem_type == "regression":
        if num_labels == 1:
            return F.mse_loss(pooled_logits.squeeze(), labels.squeeze())
        return F.mse_loss(pooled_logits, labels)
    if config.problem_type == "single_label_classification":
        return F.cross_entropy(pooled_logits.view(-1, num_labels), labels.view(-1))
    if config.problem_type == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(pooled_logits, labels)
    raise ValueError(f"invalid problem_type {config.problem_type!r}")


#: ``layout`` values of the ``moe_experts`` contract: how the expert matrices are oriented.
MOE_LAYOUTS = ("fused", "transposed")


def check_moe_experts_options(
    hidden_states: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    *,
    layout: str,
    gate_up_bias: torch.Tensor | None,
    down_bias: torch.Tensor | None,
    limit: float | None,
    alpha: float | None,
    activation_first: bool = False,
) -> tuple[int, int]:
    """Validate the keyword options of the ``moe_experts`` contract against the shapes; returns ``(H, I)``.

    The layout is what ``layout`` says, never guessed from shapes: when ``H == 2I`` or ``H == I`` the
    shapes alone cannot tell ``[E, 2I, H]`` from ``[E, H, 2I]``. The check still catches a wrong
    keyword, because the two matrices must agree with each other: read in the wrong layout, the
    down-projection would need ``I == 2I``.
    """
    if layout not in MOE_LAYOUTS:
        raise ValueError(f"moe_experts: layout must be one of {MOE_LAYOUTS}, got {layout!r}")
    if alpha is not None and limit is None:
        raise ValueError("moe_experts: alpha (gpt_oss's clamped SwiGLU) needs limit")
    if activation_first and alpha is not None:
        raise ValueError(
            "moe_experts: activation_first clamps ACT(gate) (Step-3.7's unit); gpt_oss's alpha unit has none"
        )
    if gate_up_proj.dim() != 3 or down_proj.dim() != 3:
        raise ValueError(
            f"moe_experts: expert weights must be 3-D, got gate_up_proj {tuple(gate_up_proj.shape)}, "
            f"down_proj {tuple(down_proj.shape)}"
        )
    num_experts = gate_up_proj.shape[0]
    if layout == "fused":  # [E, 2I, H], [E, H, I]: y = x @ W[e].T, nn.Linear's orientation
        two_i, hidden = gate_up_proj.shape[1], gate_up_proj.shape[2]
        expected_down = (num_experts, hidden, two_i // 2)
    else:  # [E, H, 2I], [E, I, H]: y = x @ W[e]
        hidden, two_i = gate_up_proj.shape[1], gate_up_proj.shape[2]
        expected_down = (num_experts, two_i // 2, hidden)
    if two_i % 2 or tuple(down_proj.shape) != expected_down or hidden_states.shape[-1] != hidden:
        raise ValueError(
            f"moe_experts: layout {layout!r} reads gate_up_proj {tuple(gate_up_proj.shape)} as "
            f"{'[E, 2I, H]' if layout == 'fused' else '[E, H, 2I]'}, so down_proj must be {expected_down} and "
            f"hidden_states [..., {hidden}]; got down_proj {tuple(down_proj.shape)}, hidden_states "
            f"{tuple(hidden_states.shape)} (is the layout keyword right?)"
        )
    if gate_up_bias is not None and tuple(gate_up_bias.shape) != (num_experts, two_i):
        raise ValueError(f"moe_experts: gate_up_bias must be {(num_experts, two_i)}, got {tuple(gate_up_bias.shape)}")
    if down_bias is not None and tuple(down_bias.shape) != (num_experts, hidden):
        raise ValueError(f"moe_experts: down_bias must be {(num_experts, hidden)}, got {tuple(down_bias.shape)}")
    return hidden, two_i // 2


def split_gate_up(gate_up: torch.Tensor, interleaved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Gate and up halves of a ``[..., 2I]`` projection: gate-first halves, or gpt_oss's interleaved columns."""
    if interleaved:
        return gate_up[..., ::2], gate_up[..., 1::2]
    gate, up = gate_up.chunk(2, dim=-1)
    return gate, up


def experts_glu(
    gate: torch.Tensor,
    up: torch.Tensor,
    activation: str,
    *,
    limit: float | None,
    alpha: float | None,
    activation_first: bool = False,
) -> torch.Tensor:
    """The gated unit of one expert, upstream's formula for each variant of the contract.

    - neither: ``ACT(gate) * up`` (qwen3_moe, mixtral, deepseek_v3, ...);
    - ``limit``: DeepSeek-V4's clamped SwiGLU, ``ACT(gate.clamp(max=limit)) * up.clamp(-limit, limit)``;
    - ``limit`` and ``alpha``: gpt_oss's, ``g = gate.clamp(max=limit)``,
      ``(up.clamp(-limit, limit) + 1) * g * sigmoid(g * alpha)``; ``activation`` is not used;
    - ``limit`` and ``activation_first``: Step-3.7's, ``ACT(gate).clamp(max=limit) * up.clamp(-limit, limit)``.
    """
    if activation_first:
        gate = activation_module(activation)(gate)
        if limit is not None:
            gate = gate.clamp(max=limit)
            up = up.clamp(min=-limit, max=limit)
        return gate * up
    if limit is not None:
        gate = gate.clamp(min=None, max=limit)
        up = up.clamp(min=-limit, max=limit)
    if alpha is not None:
        glu = gate * torch.sigmoid(gate * alpha)
        return (up + 1) * glu
    return activation_module(activation)(gate) * up


def moe_experts(
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    activation: str,
    *,
    layout: str = "fused",
    interleaved: bool = False,
    gate_up_bias: torch.Tensor | None = None,
    down_bias: torch.Tensor | None = None,
    limit: float | None = None,
    alpha: float | None = None,
    activation_first: bool = False,
) -> torch.Tensor:
    """Routed experts, upstream's per-expert loop (``Qwen3MoeExperts.forward``, ``GptOssExperts.forward``).

    ``hidden_states`` is ``[tokens, H]``, ``top_k_index`` / ``top_k_weights`` are ``[tokens, K]``. Each
    token's output is the routing-weighted sum of ``down(GLU(gate_up(x)))`` over its K experts,
    accumulated expert by expert in the output dtype. The keywords select the expert's layout:

    - ``layout="fused"`` (default): ``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``, applied as
      ``F.linear``; ``layout="transposed"``: ``[E, H, 2I]`` and ``[E, I, H]``, applied as ``x @ W[e]``
      (gpt_oss). Never inferred from shapes.
    - ``interleaved``: gate and up are the even and odd columns of the 2I axis (gpt_oss), not halves.
    - ``gate_up_bias [E, 2I]`` (same column order as the projection) and ``down_bias [E, H]``, added
      after each matmul, before the routing weight.
    - ``limit`` / ``alpha`` / ``activation_first``: the clamped gated units of :func:`experts_glu`.
    """
    check_moe_experts_options(
        hidden_states,
        gate_up_proj,
        down_proj,
        layout=layout,
        gate_up_bias=gate_up_bias,
        down_bias=down_bias,
        limit=limit,
        alpha=alpha,
        activation_first=activation_first,
    )
    num_experts = gate_up_proj.shape[0]
    fused = layout == "fused"
    final_hidden_states = torch.zeros_like(hidden_states)
    with torch.no_grad():
        expert_mask = F.one_hot(top_k_index, num_classes=num_experts).permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()

    for expert_idx in expert_hit:
        expert_idx = expert_idx[0]
        top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
        current = hidden_states[token_idx]
        gate_up = F.linear(current, gate_up_proj[expert_idx]) if fused else current @ gate_up_proj[expert_idx]
        if gate_up_bias is not None:
            gate_up = gate_up + gate_up_bias[expert_idx]
        gate, up = split_gate_up(gate_up, interleaved)
        current = experts_glu(gate, up, activation, limit=limit, alpha=alpha, activation_first=activation_first)
        current = F.linear(current, down_proj[expert_idx]) if fused else current @ down_proj[expert_idx]
        if down_bias is not None:
            current = current + down_bias[expert_idx]
        current = current * top_k_weights[token_idx, top_k_pos, None]
        final_hidden_states.index_add_(0, token_idx, current.to(final_hidden_states.dtype))
    return final_hidden_states


def load_balancing_loss(router_logits: Any, num_experts: int, top_k: int, attention_mask: Any) -> torch.Tensor | int:
    """Switch-Transformer auxiliary loss, HF ``load_balancing_loss_func`` semantics.

    ``router_logits`` is a tuple of per-layer ``[batch * seq, num_experts]`` logits; anything else (None,
    a bare tensor, an empty tuple) has no routing to balance and gives the **int** ``0``, as upstream
    does for None. ``attention_mask`` (``[batch, seq]``) keeps padding out of both statistics. A 4-D mask,
    or a dict of masks by attention type, on which upstream's function fails, counts the real tokens its
    diagonal names (``modelgraft.models.ops.kernels.token_mask``): the loss upstream computes from the 2-D mask.
    """
    if not isinstance(router_logits, tuple) or not router_logits:
        return 0
    attention_mask = real_token_mask(attention_mask)
    device = router_logits[0].device
    tokens_per_expert = torch.zeros(num_experts, dtype=torch.float32, device=device)
    router_prob = torch.zeros(num_experts, dtype=torch.float32, device=device)
    total_rows: Any = 0.0
    if attention_mask is not None:
        flat_mask = attention_mask.reshape(-1).to(device=device, dtype=torch.float32)
    for layer_logits in router_logits:
        routing_weights = F.softmax(layer_logits.to(device), dim=-1)
        _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
        if attention_mask is None:
            counts = torch.bincount(selected_experts.reshape(-1), minlength=num_experts).float()
            tokens_per_expert = tokens_per_expert + counts
            router_prob = router_prob + routing_weights.float().sum(dim=0)
            total_rows = total_rows + routing_weights.shape[0]
        else:
            counts = torch.zeros(num_experts, dtype=torch.float32, device=device).scatter_add_(
                0, selected_experts.reshape(-1), flat_mask.repeat_interleave(top_k)
            )
            tokens_per_expert = tokens_per_expert + counts
            router_prob = router_prob + (routing_weights.float() * flat_mask.unsqueeze(-1)).sum(dim=0)
            total_rows = total_rows + flat_mask.sum()
    overall = torch.sum((tokens_per_expert / total_rows) * (router_prob / total_rows).unsqueeze(0))
    return overall * num_experts


def _unweighted_rms_fp32(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x`` in fp32 over its RMS (last dim): the input norm of the mHC mappings."""
    x = x.float()
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


def sinkhorn(logits: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    """Sinkhorn-Knopp projection of ``[..., n, n]`` logits towards a doubly-stochastic matrix (DeepSeek-V4's mHC).

    A softmax over the last axis (plus ``eps``) makes the matrix positive with unit rows; one column
    normalisation follows, then ``iters - 1`` rounds of row and column normalisation, each dividing by
    the sum plus ``eps``.
    """
    comb = torch.softmax(logits, dim=-1) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    return comb


def hyper_connection(
    hidden_streams: torch.Tensor,
    fn: torch.Tensor,
    base: torch.Tensor,
    scale: torch.Tensor,
    *,
    hc_mult: int,
    eps: float,
    norm_eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The mHC mapping of ``hc_mult`` residual streams ``[B, S, n, D]``: ``(pre, post, comb_logits)``, in fp32.

    The flattened streams, RMS-normalised in fp32, project through ``fn`` to ``n`` pre, ``n`` post and
    ``n * n`` comb logits; each is scaled by its entry of ``scale`` and shifted by its slice of ``base``.
    ``pre`` (sigmoid + eps) collapses the streams into the sublayer input, ``post`` (2 sigmoid) places the
    sublayer output back, and the comb logits become the stream mixer through :func:`sinkhorn`.
    """
    n = hc_mult
    mix = F.linear(_unweighted_rms_fp32(hidden_streams.flatten(start_dim=2), norm_eps), fn.float())
    pre_logits, post_logits, comb_logits = mix.split([n, n, n * n], dim=-1)
    pre = torch.sigmoid(pre_logits * scale[0] + base[:n]) + eps
    post = 2 * torch.sigmoid(post_logits * scale[1] + base[n : 2 * n])
    return pre, post, comb_logits.unflatten(-1, (n, n)) * scale[2] + base[2 * n :].view(n, n)


def hyper_connection_post(
    output: torch.Tensor, hidden_streams: torch.Tensor, post: torch.Tensor, comb: torch.Tensor
) -> torch.Tensor:
    """The streams after a sublayer: ``output [B, S, D]`` placed by ``post``, plus the streams mixed by ``comb``.

    ``comb`` is read transposed (stream ``k`` receives ``sum_j comb[j, k] * stream_j``); both weights are
    cast to the streams' dtype first.
    """
    dtype = hidden_streams.dtype
    placed = post.to(dtype).unsqueeze(-1) * output.unsqueeze(-2)
    return placed + torch.matmul(comb.to(dtype).transpose(-1, -2), hidden_streams)


def hyper_head(
    hidden_streams: torch.Tensor,
    fn: torch.Tensor,
    base: torch.Tensor,
    scale: torch.Tensor,
    *,
    eps: float,
    norm_eps: float,
) -> torch.Tensor:
    """The final collapse of the mHC streams ``[B, S, n, D]`` into ``[B, S, D]``, with weights computed in fp32."""
    mix = F.linear(_unweighted_rms_fp32(hidden_streams.flatten(2), norm_eps), fn.float())
    pre = torch.sigmoid(mix * scale.float() + base.float()) + eps
    return (pre.unsqueeze(-1) * hidden_streams).sum(dim=2).to(hidden_streams.dtype)


def _scaled_routing_weights(
    scores: torch.Tensor, indices: torch.Tensor, scaling: float, *, normalize: bool = True
) -> torch.Tensor:
    """The chosen experts' scores, divided by their sum (+ 1e-20 against an all-zero row) unless told not to, scaled."""
    chosen = scores.gather(1, indices)
    if normalize:
        chosen = chosen / (chosen.sum(dim=-1, keepdim=True) + 1e-20)
    return chosen * scaling


def hash_router(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    tid2eid: torch.Tensor,
    input_ids: torch.Tensor,
    *,
    scoring_func: str,
    routed_scaling_factor: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hash routing: each token's experts are its row of the frozen table ``tid2eid [V, K]``.

    Returns ``(router_logits [T, E], weights [T, K], indices [T, K])``; the weights are the
    ``scoring_func`` scores (an HF ``ACT2FN`` name) of the chosen experts, normalised, times
    ``routed_scaling_factor``.
    """
    logits = F.linear(hidden_states.reshape(-1, weight.shape[-1]), weight)
    scores = activation_module(scoring_func)(logits)
    indices = tid2eid[input_ids.reshape(-1)].long()
    return logits, _scaled_routing_weights(scores, indices, routed_scaling_factor), indices


def correction_bias_router(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    e_score_correction_bias: torch.Tensor,
    *,
    top_k: int,
    scoring_func: str,
    routed_scaling_factor: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-k routing on biased scores: the bias picks the experts, the unbiased scores weight them.

    Returns ``(router_logits [T, E], weights [T, K], indices [T, K])`` (indices unsorted, as upstream's).
    """
    logits = F.linear(hidden_states.reshape(-1, weight.shape[-1]), weight)
    scores = activation_module(scoring_func)(logits)
    indices = torch.topk(scores + e_score_correction_bias, top_k, dim=-1, sorted=False).indices
    return logits, _scaled_routing_weights(scores, indices, routed_scaling_factor), indices


def lightning_indexer(
    q: torch.Tensor,
    compressed_kv: torch.Tensor,
    hidden_states: torch.Tensor,
    weights_proj: torch.Tensor,
    *,
    softmax_scale: float,
    weights_scaling: float,
) -> torch.Tensor:
    """Index scores ``[B, S, T]`` of the lightning indexer, in fp32.

    Per query head ``h``: ``relu(q[h] . k_t) * softmax_scale`` for every compressed key ``k_t``, weighted
    by the head's gate ``hidden_states @ weights_proj.T * weights_scaling`` and summed over heads.
    """
    scores = torch.matmul(q.float(), compressed_kv.float().transpose(-1, -2).unsqueeze(1))  # [B, S, h, T]
    gates = F.linear(hidden_states, weights_proj).float() * weights_scaling  # [B, S, h]
    return (F.relu(scores) * softmax_scale * gates.unsqueeze(-1)).sum(dim=2)


def dsa_indexer(
    q: torch.Tensor,
    k: torch.Tensor,
    hidden_states: torch.Tensor,
    weights_proj: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor,
    *,
    softmax_scale: float,
    weights_scaling: float,
    index_topk: int,
) -> torch.Tensor:
    """The int32 indices ``[B, S, min(index_topk, T)]`` of the keys a DSA indexer selects for each query.

    Kept operation for operation as GLM-MoE-DSA computes it, because the top-k turns any rounding
    difference into a different key set: the scale goes inside the relu, the head gates are computed from
    ``hidden_states`` cast to the (fp32-kept) gate weight's dtype, and the heads are reduced by a matmul.
    The ``attention_mask`` (``[B, S, T]``) is additive, or boolean (True where a key may be attended); without
    one, keys after each query's position are masked.
    """
    scores = F.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * softmax_scale)  # [B, S, h, T]
    gates = F.linear(hidden_states.to(weights_proj.dtype), weights_proj).float() * weights_scaling  # [B, S, h]
    index_scores = torch.matmul(gates.unsqueeze(-2), scores).squeeze(-2)  # [B, S, T]
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        index_scores = index_scores.masked_fill(~attention_mask, float("-inf"))
    elif attention_mask is not None:
        index_scores = index_scores + attention_mask
    else:
        keys = torch.arange(index_scores.shape[-1], device=index_scores.device)
        index_scores = index_scores.masked_fill(keys[None, None, :] > position_ids[:, :, None], float("-inf"))
    return index_scores.topk(min(index_topk, index_scores.shape[-1]), dim=-1).indices.to(torch.int32)


def group_limited_router(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    e_score_correction_bias: torch.Tensor,
    *,
    top_k: int,
    n_group: int,
    topk_group: int,
    norm_topk_prob: bool,
    routed_scaling_factor: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DeepSeek-V3's routing: sigmoid scores, biased choice limited to the best expert groups.

    Everything runs in fp32 whatever the model dtype, as upstream does, because the choice of experts is
    a top-k that any rounding can flip. The bias only decides which experts are chosen; the weights are
    the unbiased scores. A group's rank is the sum of its two best biased scores. Returns
    ``(router_logits [T, E], weights [T, K], indices [T, K])``, indices unsorted as upstream's.
    """
    num_experts, hidden = weight.shape
    logits = F.linear(hidden_states.view(-1, hidden).type(torch.float32), weight.type(torch.float32))
    scores = logits.sigmoid()
    biased = scores + e_score_correction_bias
    per_group = num_experts // n_group
    group_scores = biased.view(-1, n_group, per_group).topk(2, dim=-1)[0].sum(dim=-1)
    best_groups = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, best_groups, 1)
    expert_mask = group_mask.unsqueeze(-1).expand(-1, n_group, per_group).reshape(-1, num_experts)
    biased = biased.masked_fill(~expert_mask.bool(), float("-inf"))
    indices = torch.topk(biased, k=top_k, dim=-1, sorted=False)[1]
    weights = _scaled_routing_weights(scores, indices, routed_scaling_factor, normalize=norm_topk_prob)
    return logits, weights, indices


def gated_mlp(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    activation: str,
    *,
    gate_bias: torch.Tensor | None = None,
    up_bias: torch.Tensor | None = None,
    down_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """A whole gated MLP, ``down(ACT(gate(x)) * up(x))``, from its projections' weights and biases.

    Each projection is ``F.linear``, which is what an ``nn.Linear`` computes, so passing a module's
    ``weight`` and ``bias`` (None without one) gives upstream's MLP bit for bit.
    """
    gate = F.linear(x, gate_weight, gate_bias)
    up = F.linear(x, up_weight, up_bias)
    return F.linear(activation_module(activation)(gate) * up, down_weight, down_bias)


#: The two ways upstream's softmax routers reach fp32: ``softmax(logits, dtype=torch.float)`` (Qwen) and
#: ``softmax(logits.float())`` (Mixtral, MiniMax). Same values, but not the same autograd graph, so the
#: kernel spells out whichever one the guarded body uses.
SOFTMAX_TOPK_UPCASTS = ("dtype_arg", "float_call")


def softmax_topk_router(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    *,
    top_k: int,
    norm_topk_prob: bool,
    upcast: str = "dtype_arg",
    cast_back: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Softmax over every expert in fp32, then the top-k of those probabilities (Qwen2/3-MoE, Mixtral, ...).

    Written op for op as upstream's router, the renormalisation in place included, so the values and the
    gradients are upstream's bit for bit. ``upcast`` picks how the logits reach fp32 (see
    :data:`SOFTMAX_TOPK_UPCASTS`) and ``cast_back`` whether the weights return to the logits' dtype (Qwen)
    or stay fp32 (Mixtral); the defaults are Qwen3-MoE's body. A router that always renormalises is handed
    ``norm_topk_prob=True``. Returns ``(router_logits [T, E], weights [T, K], indices [T, K])``: the logits
    in the input's dtype, the experts sorted by probability.
    """
    if upcast not in SOFTMAX_TOPK_UPCASTS:
        raise ValueError(f"softmax_topk_router: upcast must be one of {SOFTMAX_TOPK_UPCASTS}, got {upcast!r}")
    logits = F.linear(hidden_states.reshape(-1, weight.shape[-1]), weight)
    if upcast == "dtype_arg":
        probs = F.softmax(logits, dtype=torch.float, dim=-1)
    else:
        probs = F.softmax(logits.float(), dim=-1)
    weights, indices = torch.topk(probs, top_k, dim=-1)
    if norm_topk_prob:
        weights /= weights.sum(dim=-1, keepdim=True)
    if cast_back:
        weights = weights.to(logits.dtype)
    return logits, weights, indices


def topk_softmax_router(
    hidden_states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *, top_k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The top-k of the biased logits, then a softmax over those k values alone (gpt_oss).

    The softmax runs in the logits' own dtype, as upstream's does (no fp32 upcast), and over dim 1, the k
    axis of the ``[T, K]`` top values. Returns ``(router_logits [T, E], weights [T, K], indices [T, K])``.
    """
    logits = F.linear(hidden_states, weight, bias)
    top, indices = torch.topk(logits, top_k, dim=-1)
    return logits, F.softmax(top, dim=1, dtype=top.dtype), indices


def placeholder_features(mask: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """``placeholder_features`` slot contract with one process: it holds every placeholder, so every feature."""
    if int(mask.sum()) != features.shape[0]:
        raise ValueError(f"{int(mask.sum())} placeholders for {features.shape[0]} features")
    return features
