"""Reference implementation of every slot contract, in plain torch with HF's numerics.

These are the semantic spec the other kernels are tested against; binding "eager" does not bind them
(an unbound slot runs the upstream code itself), but they are bindable like any kernel for tests.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from models.ops.kernels.loss_inputs import divide_by_num_items, shift_causal_labels


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
    unweighted norm (nanochat): normalized in fp32, cast back.
    """
    if cast_last is None:
        cast_last = offset != 0.0
    input_dtype = hidden_states.dtype
    x = hidden_states.to(torch.float32)
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if weight is None:
        return normed.to(input_dtype)
    if not cast_last:
        return (weight + offset if offset else weight) * normed.to(input_dtype)
    return (normed * (offset + weight.float())).to(input_dtype)


@cache
def _activation(name: str) -> nn.Module:
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
    return _activation(activation)(hidden_states)


def glu_activation(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """``ACT(gate) * up`` with ``activation`` an HF ``hidden_act`` name."""
    return _activation(activation)(gate) * up


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary embedding of q and k, HF ``apply_rotary_pos_emb`` layout (cos/sin unsqueezed at ``unsqueeze_dim``).

    The defaults are llama's rotate-half. ``interleaved`` rotates even/odd pairs instead of halves, and
    ``repeat_cos`` first repeats the first half of cos/sin pairwise (helium, glm); ``upcast`` rotates in fp32
    and casts back (cohere, ernie4_5); ``cast_back`` casts the result to q's and k's dtypes (olmo). When cos
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
        if rotary_dim == x.shape[-1]:
            rotated = x.float() if upcast else x
            out = rotated * cos + rotate(rotated) * sin
        else:
            part = x[..., :rotary_dim].float() if upcast else x[..., :rotary_dim]
            out = torch.cat([part * cos + rotate(part) * sin, x[..., rotary_dim:]], dim=-1)
        return out.to(x.dtype) if upcast or cast_back else out

    return embed(q), embed(k)


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
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token cross entropy from hidden states; materializes the logits and returns them too.

    ``hidden_states`` are already sliced to the kept positions; ``labels`` are unshifted unless
    ``shift_labels`` is given. Logits are soft-capped in the model dtype and upcast to fp32 for the loss,
    which is the mean over non-ignored targets, or their sum / ``num_items_in_batch`` when given.
    ``lm_head_bias`` is the bias of an lm_head that has one (phi, codegen). Extra ``kwargs`` (model forward kwargs passed along by generated code) are ignored, as upstream does.
    """
    logits = softcap_logits(F.linear(hidden_states, lm_head_weight, lm_head_bias), final_logit_softcapping)
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


def moe_experts(
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    activation: str,
) -> torch.Tensor:
    """Routed experts over the fused layout, upstream's per-expert loop (``Qwen3MoeExperts.forward``).

    ``hidden_states`` is ``[tokens, H]``, ``top_k_index`` / ``top_k_weights`` are ``[tokens, K]``,
    ``gate_up_proj`` is ``[E, 2I, H]`` with the gate rows first and ``down_proj`` is ``[E, H, I]``.
    Each token's output is the routing-weighted sum of ``down(ACT(gate(x)) * up(x))`` over its K experts,
    accumulated expert by expert in the output dtype.
    """
    num_experts = gate_up_proj.shape[0]
    act_fn = _activation(activation)
    final_hidden_states = torch.zeros_like(hidden_states)
    with torch.no_grad():
        expert_mask = F.one_hot(top_k_index, num_classes=num_experts).permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()

    for expert_idx in expert_hit:
        expert_idx = expert_idx[0]
        top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
        gate, up = F.linear(hidden_states[token_idx], gate_up_proj[expert_idx]).chunk(2, dim=-1)
        current = F.linear(act_fn(gate) * up, down_proj[expert_idx])
        current = current * top_k_weights[token_idx, top_k_pos, None]
        final_hidden_states.index_add_(0, token_idx, current.to(final_hidden_states.dtype))
    return final_hidden_states


def load_balancing_loss(
    router_logits: Any, num_experts: int, top_k: int, attention_mask: torch.Tensor | None
) -> torch.Tensor | int:
    """Switch-Transformer auxiliary loss, HF ``load_balancing_loss_func`` semantics.

    ``router_logits`` is a tuple of per-layer ``[batch * seq, num_experts]`` logits; anything else (None,
    a bare tensor, an empty tuple) has no routing to balance and gives the **int** ``0``, as upstream
    does for None. ``attention_mask`` (``[batch, seq]``) keeps padding out of both statistics.
    """
    if not isinstance(router_logits, tuple) or not router_logits:
        return 0
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
