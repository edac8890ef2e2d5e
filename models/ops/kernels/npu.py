"""Ascend NPU kernels (torch_npu) behind the slot contracts: the device half of the npu backend.

The npu generated files carry the same slot guards as the gpu ones; what makes
a model run NPU kernels is binding this family. Imported only by
``modelgraft.models.ops.kernels.load_kernel`` after it checked that ``torch_npu`` exists.
Argument layouts follow torch_npu's documented fused operators. A formulation those operators cannot compute
(an unweighted RMSNorm, a GLU other than SiLU's, partial or interleaved rotary) is refused when the slot is
called, with a ``FormulationRefusedError`` naming the slot to bind ``'eager'``.
"""

from __future__ import annotations

import torch
import torch_npu

from modelgraft.models.ops.errors import FormulationRefusedError
from modelgraft.models.ops.kernels.gated_mlp import gated_mlp_with

#: The activations ``npu_swiglu`` computes: SiLU, under both of transformers' names.
SWIGLU_ACTIVATIONS = ("silu", "swish")


def rms_norm(
    hidden_states: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    *,
    offset: float = 0.0,
    cast_last: bool | None = None,
) -> torch.Tensor:
    """``npu_rms_norm`` returns (normed, rstd); gemma's (1 + weight) scale is folded into the weight.

    A cast-last formulation (gemma, olmo2) normalizes and scales in fp32, then casts back.
    """
    if weight is None:
        raise FormulationRefusedError("rms_norm", "npu", "needs a weight")
    if cast_last is None:
        cast_last = offset != 0.0
    scale = weight.float() + offset if offset else weight
    if cast_last:
        normed = torch_npu.npu_rms_norm(hidden_states.float(), scale.float(), epsilon=eps)[0]
        return normed.to(hidden_states.dtype)
    return torch_npu.npu_rms_norm(hidden_states, scale.to(hidden_states.dtype), epsilon=eps)[0]


def _refuse_unless_swiglu(slot: str, activation: str) -> None:
    if activation not in SWIGLU_ACTIVATIONS:
        raise FormulationRefusedError(slot, "npu", f"supports hidden_act silu/swish, got {activation!r}")


def glu_activation(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """``npu_swiglu`` takes gate and up concatenated on the last dimension; SiLU only."""
    _refuse_unless_swiglu("glu_activation", activation)
    return torch_npu.npu_swiglu(torch.cat((gate, up), dim=-1), dim=-1)


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
    """The whole MLP around this family's GLU kernel (models.ops.kernels.gated_mlp); a refusal names this slot."""
    _refuse_unless_swiglu("gated_mlp", activation)
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
    """``npu_rotary_mul`` applies rotate-half RoPE with cos/sin broadcast over the heads dimension."""
    if interleaved or repeat_cos or upcast or upcast_terms or cast_back or cos.shape[-1] != q.shape[-1]:
        raise FormulationRefusedError(
            "rope",
            "npu",
            "computes llama's full rotate-half only (no interleaved pairs, partial rotary or dtype casts)",
        )
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)
