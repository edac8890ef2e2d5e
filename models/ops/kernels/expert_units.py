"""The experts' gated units with their derivatives written out, for the grouped kernel's backward
(and their values computed in place, for its forward: :func:`gated_value`).

The grouped kernel recomputes each expert's gated unit in backward from the saved pre-activations. Taking
the unit's derivative from autograd means building a small graph per expert and per call, plus a
``[n, 2I]`` gradient assembled from two halves afterwards; on CPU that was about a fifth of a clamped
layer's forward + backward. The units of the ``moe_experts`` contract have short closed-form derivatives,
so each is written here, straight into the two halves (or interleaved columns) of one ``[n, 2I]`` buffer:

- ``ACT(gate) * up`` with SiLU: ``silu_backward`` for the gate half, ``grad * silu(gate)`` for the up half;
- DeepSeek-V4's clamped SwiGLU: the same at the clamped inputs, zero where a clamp cut its input;
- gpt_oss's ``(up' + 1) * g * sigmoid(alpha g)`` (``g``, ``up'`` clamped): ``d/dg = sigmoid(alpha g) * (1 +
  alpha g (1 - sigmoid(alpha g)))``, zero where a clamp cut.

A clamp passes the gradient where its input lies within its bounds, bounds included, and zeroes it for
a NaN input, as torch's clamp does. Values are :func:`modelgraft.models.ops.kernels.eager.experts_glu`'s operations
in the same order, so they equal upstream's to the bit; derivatives match autograd's to rounding
(tests/runtime/test_grouped_experts_layouts.py checks both, on and just past the bounds). Other
activations, and Step-3.7's clamp after the activation, have no unit here (:func:`has_unit` says False) and
keep autograd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["SILU", "GatedUnit", "gated_value", "has_unit"]

#: Activation names that mean SiLU.
SILU = frozenset({"silu", "swish"})


class GatedUnit:
    """One expert segment's gated unit: its value, and its gradient written into given buffers."""

    def __init__(self, gate: torch.Tensor, up: torch.Tensor, *, limit: float | None, alpha: float | None) -> None:
        self.gate, self.up, self.limit, self.alpha = gate, up, limit, alpha
        self.gate_in = gate if limit is None else gate.clamp(min=None, max=limit)
        self.up_in = up if limit is None else up.clamp(min=-limit, max=limit)
        if alpha is None:
            self.gate_value = F.silu(self.gate_in)
            self.value = self.gate_value * self.up_in
        else:
            self.sigmoid = torch.sigmoid(self.gate_in * alpha)
            self.gate_value = self.gate_in * self.sigmoid
            self.value = (self.up_in + 1) * self.gate_value

    def backward(self, grad: torch.Tensor, grad_gate: torch.Tensor, grad_up: torch.Tensor) -> None:
        """Write d(loss)/d(gate) and d(loss)/d(up) into ``grad_gate`` / ``grad_up``; ``grad`` is overwritten."""
        torch.mul(grad, self.gate_value, out=grad_up)
        if self.alpha is None:
            torch.ops.aten.silu_backward.grad_input(grad.mul_(self.up_in), self.gate_in, grad_input=grad_gate)
        else:
            slope = (1 - self.sigmoid).mul_(self.gate_in).mul_(self.alpha).add_(1).mul_(self.sigmoid)
            torch.mul(grad.mul_(self.up_in + 1), slope, out=grad_gate)
        if self.limit is not None:
            # A clamp changed its input exactly where that input lay outside the bounds (NaN included, whose
            # gradient torch's clamp also zeroes): one comparison per half instead of one per bound.
            grad_gate.masked_fill_(self.gate_in != self.gate, 0)
            grad_up.masked_fill_(self.up_in != self.up, 0)


def gated_value(gate: torch.Tensor, up: torch.Tensor, *, limit: float | None, alpha: float | None) -> torch.Tensor:
    """The unit's value for the forward pass, :class:`GatedUnit`'s units only, in a fresh ``[n, I]`` tensor.

    The operations and their order are :func:`modelgraft.models.ops.kernels.eager.experts_glu`'s, so the values are
    the same to the bit; they are done in place on the first temporary, so one expert allocates one to
    three ``[n, I]`` tensors instead of two to seven (the forward pass keeps none of them: the backward
    pass recomputes the unit from the saved pre-activations).
    """
    if limit is not None:
        gate = gate.clamp(min=None, max=limit)
        up = up.clamp(min=-limit, max=limit)
    if alpha is None:
        return (F.silu(gate, inplace=True) if limit is not None else F.silu(gate)).mul_(up)
    glu = torch.mul(gate, alpha).sigmoid_().mul_(gate)
    return (up.add_(1) if limit is not None else up + 1).mul_(glu)


def has_unit(activation: str, *, alpha: float | None, activation_first: bool = False) -> bool:
    """Whether :class:`GatedUnit` covers this unit: gpt_oss's (``alpha``), or SiLU, clamped or not; Step-3.7's
    clamp of the activated gate (``activation_first``) has no written-out derivative and keeps autograd."""
    return not activation_first and (alpha is not None or activation in SILU)
