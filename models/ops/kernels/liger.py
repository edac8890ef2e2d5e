"""Liger-Kernel (Triton, CUDA) behind the slot contracts.

Imported only by ``modelgraft.models.ops.kernels.load_kernel`` after it has checked that CUDA and ``liger_kernel``
are present, so importing this module on a CPU machine is an error by design. Written against the
functional API of liger-kernel 0.8.x (``liger_kernel.transformers.functional`` and ``.rope``).
"""

from __future__ import annotations

from typing import Any

import torch
from liger_kernel.transformers.functional import (
    liger_fused_linear_cross_entropy,
    liger_geglu,
    liger_rms_norm,
    liger_swiglu,
)
from liger_kernel.transformers.rope import liger_rotary_pos_emb

from modelgraft.models.ops.kernels.gated_mlp import gated_mlp_with
from modelgraft.models.ops.kernels.loss_inputs import divide_by_num_items, flat_rows_and_targets

# Liger's GEGLU kernel implements the tanh approximation of GELU only.
_GLU_KERNELS = {
    "silu": liger_swiglu,
    "swish": liger_swiglu,
    "gelu_pytorch_tanh": liger_geglu,
}


def rms_norm(
    hidden_states: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    *,
    offset: float = 0.0,
    cast_last: bool | None = None,
) -> torch.Tensor:
    """Liger RMSNorm; Llama casting (cast, then scale) unless ``cast_last``, Gemma casting (scale in fp32) then."""
    if weight is None:
        raise ValueError("liger rms_norm needs a weight; bind the 'eager' kernel to the rms_norm slot for this model")
    if cast_last is None:
        cast_last = offset != 0.0
    casting_mode = "gemma" if cast_last else "llama"
    # in_place=False: an in-place backward overwrites the incoming gradient, which q/k norms share.
    return liger_rms_norm(hidden_states, weight, eps, offset=offset, casting_mode=casting_mode, in_place=False)


def glu_activation(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """Fused ``ACT(gate) * up`` for the activations Liger implements."""
    kernel = _GLU_KERNELS.get(activation)
    if kernel is None:
        raise ValueError(
            f"liger glu_activation supports hidden_act in {sorted(_GLU_KERNELS)}, got {activation!r}; "
            "bind the 'eager' kernel for this model"
        )
    return kernel(gate, up)


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
    """The whole MLP around this family's GLU kernel (models.ops.kernels.gated_mlp)."""
    return gated_mlp_with(
        glu_activation,
        x,
        gate_weight,
        up_weight,
        down_weight,
        activation,
        gate_bias=gate_bias,
        up_bias=up_bias,
        down_bias=down_bias,
    )


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
    """Liger RoPE; it assumes q/k laid out ``[batch, heads, seq, head_dim]``, i.e. ``unsqueeze_dim == 1``."""
    if interleaved or repeat_cos or upcast or upcast_terms or cast_back or cos.shape[-1] != q.shape[-1]:
        raise ValueError(
            "liger rope computes llama's full rotate-half only (no interleaved pairs, partial rotary or dtype "
            "casts); bind the 'eager' kernel to the rope slot for this model"
        )
    if unsqueeze_dim != 1:
        raise ValueError(
            f"liger rope needs q/k as [batch, heads, seq, head_dim] (unsqueeze_dim=1), got {unsqueeze_dim}"
        )
    return liger_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)


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
) -> tuple[torch.Tensor, None]:
    """Liger fused linear cross entropy with the slot's label shift and reduction; returns ``(loss, None)``.

    Liger soft-caps the logits in fp32 in any case, which is what ``softcap_in_fp32`` asks for.
    """
    hidden, targets = flat_rows_and_targets(
        hidden_states,
        lm_head_weight,
        labels,
        vocab_size=vocab_size,
        ignore_index=ignore_index,
        shift_labels=shift_labels,
    )
    loss = liger_fused_linear_cross_entropy(
        hidden,
        lm_head_weight,
        targets,
        bias=lm_head_bias,
        ignore_index=ignore_index,
        reduction="mean" if num_items_in_batch is None else "sum",
        softcap=final_logit_softcapping,
        accum_dtype=torch.float32,
    )
    if num_items_in_batch is None:
        return loss, None
    return divide_by_num_items(loss, num_items_in_batch), None
