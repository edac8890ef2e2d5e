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


def rms_norm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float, *, offset: float = 0.0) -> torch.Tensor:
    """RMSNorm over the last dim, normalized in fp32.

    ``offset == 0`` follows Llama: cast the normalized input back, then scale by ``weight``.
    Otherwise follows Gemma: scale by ``offset + weight`` in fp32, then cast back.
    """
    input_dtype = hidden_states.dtype
    x = hidden_states.to(torch.float32)
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if offset == 0.0:
        return weight * normed.to(input_dtype)
    return (normed * (offset + weight.float())).type_as(hidden_states)


@cache
def _activation(name: str) -> nn.Module:
    from transformers.activations import ACT2FN

    return ACT2FN[name]


def glu_activation(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """``ACT(gate) * up`` with ``activation`` an HF ``hidden_act`` name."""
    return _activation(activation)(gate) * up


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary embedding of q and k, HF ``apply_rotary_pos_emb`` layout (cos/sin unsqueezed at ``unsqueeze_dim``)."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


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
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token cross entropy from hidden states; materializes the logits and returns them too.

    ``hidden_states`` are already sliced to the kept positions; ``labels`` are unshifted unless
    ``shift_labels`` is given. Logits are soft-capped in the model dtype and upcast to fp32 for the loss,
    which is the mean over non-ignored targets, or their sum / ``num_items_in_batch`` when given.
    Extra ``kwargs`` (model forward kwargs passed along by generated code) are ignored, as upstream does.
    """
    logits = softcap_logits(F.linear(hidden_states, lm_head_weight), final_logit_softcapping)
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
