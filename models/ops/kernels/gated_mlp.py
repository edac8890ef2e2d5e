"""A whole gated MLP around a family's own GLU kernel (the ``gated_mlp`` slot of Liger, NPU and ``compiled``).

A model whose MLP is guarded whole (DeepSeek-V3's shared experts and dense layers) would otherwise lose
the fused ``ACT(gate) * up`` that a model guarded at the GLU gets on those devices; the projections stay
``F.linear``, as upstream's ``nn.Linear`` computes them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = ["gated_mlp_with"]

GluKernel = Callable[[torch.Tensor, torch.Tensor, str], torch.Tensor]


def gated_mlp_with(
    glu_activation: GluKernel,
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
    """The ``gated_mlp`` slot contract, ``down(glu(gate(x), up(x)))``, with ``glu_activation`` in the middle."""
    gate = F.linear(x, gate_weight, gate_bias)
    up = F.linear(x, up_weight, up_bias)
    return F.linear(glu_activation(gate, up, activation), down_weight, down_bias)
