"""Routed experts as the ``grouped`` kernel runs them, with the backward's gated-unit block compiled by inductor.

The ``grouped_compiled`` family. Its two operators (``torch.ops.modelgraft.grouped_compiled_experts_fwd`` and
``..._bwd``) run ``grouped``'s loops (``modelgraft.models.ops.kernels.grouped_experts``): one expert-sorted
segment at a time, the matmuls as ``torch.mm`` on each segment, the row gathers as ``index_select`` and the
combine as ``index_add_``. What differs is one block of the backward, per segment: from the saved
pre-activations, the gradient of the weighted activations and the routing weights, it recomputes the gated
unit, takes each row's routing-weight gradient (a row-wise dot product), scales the activations for the
down projection's weight gradient, and writes the unit's derivative for both halves. Eagerly that is about
ten element-wise operations (two of them exponentials) over ``[n, I]``; here it is :func:`unit_gradients`,
plain torch compiled by inductor into one C++ loop that reads the segment once.

What was tried and left eager, measured per experts layer at E=64, k=8, H=512, I=192, 2048 tokens, fp32,
one thread (thread CPU time, medians of 12 interleaved rounds; docs/performance.md has the figures):

- the backward block, compiled: 10.3 ms against 14.1 ms eagerly, so it is compiled;
- the forward's unit (activation * up * routing weight), compiled: 8.1 ms against 5.9 ms eagerly. Eagerly it
  is three operations done in place on a temporary that stays in cache; compiled, each call pays dynamo's
  and the compiled wrapper's fixed cost (about 25 us, 64 calls per layer) and computes no faster;
- ``index_add_`` of 256 rows of 512 into the output, compiled (as ``index_put_`` with accumulation, or as a
  gather-add-scatter): 99 to 124 us against 32 us for ``index_add_``; a row gather compiled by inductor is a
  copy like ``index_select``.

Compiled per call's options: dtype, the expert width, gate/up order and the unit's clamp and alpha make one
:class:`CompiledUnit`, created when the first call with those options needs it and kept for the process.
Its compiled function is a copy of :func:`unit_gradients` with a code object of its own, because dynamo
keeps compiled graphs, and counts them against its recompile limit (8), per code object; with
``fullgraph=True`` a ninth would be an error, and a process that runs many layouts (the tests) would reach
it. The row count is dynamic (``maybe_mark_dynamic``), the widths static, so segments of every size share
one graph. Dynamo specializes sizes and storage offsets of 0 and 1; a segment that would need such a graph
of its own (one row, or the first expert's, which starts its buffer) runs ``grouped``'s eager unit instead,
so each set of options compiles once.

Under an outer ``torch.compile`` (a decoder layer compiled by its user), the operators are opaque nodes,
as ``grouped``'s are: the outer graph holds one call of each, and at run time the backward operator calls
the compiled unit like any other code. Should the unit's code ever run while dynamo traces (it is not
reached from a traced graph today), it runs :func:`unit_gradients` as plain torch, which the outer graph
would then compile with everything around it.

Binding the family needs a C++ compiler, which inductor needs on a CPU (``$CXX``, else ``g++``):
``modelgraft.models.ops.kernels.KERNEL_FAMILIES`` checks for one when the family is bound and refuses with
that reason where there is none. The first call with a set of options compiles (about 1 s, plus inductor's
own start in a process that has not compiled before; inductor caches the result on disk for later
processes).

Numerics: ``grouped``'s, but for the compiled block, which computes the same formulas (SiLU's derivative as
``sigmoid(g) * (1 + g * (1 - sigmoid(g)))``, the clamps' zero gradient where they cut, NaN included) in
inductor's order and in fp32 for bf16 inputs; outputs and gradients match ``grouped`` within fp32 rounding
and the eager reference within ``KERNEL_TOLERANCE`` (tests/runtime/test_grouped_experts_layouts.py,
tests/compile/test_kernels.py).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch

from modelgraft.models.ops.kernels.code_objects import own_code
from modelgraft.models.ops.kernels.eager import split_gate_up
from modelgraft.models.ops.kernels.expert_units import has_unit
from modelgraft.models.ops.kernels.grouped_experts import define_operators, run_experts

__all__ = ["BACKWARD_OP", "FORWARD_OP", "CompiledUnit", "compiled_unit", "moe_experts", "unit_gradients"]

#: The operators' qualified names, as ``torch.ops`` and compiled graphs show them.
FORWARD_OP = "modelgraft::grouped_compiled_experts_fwd"
BACKWARD_OP = "modelgraft::grouped_compiled_experts_bwd"


def unit_gradients(
    segment: torch.Tensor,
    grad_weighted: torch.Tensor,
    weight: torch.Tensor,
    interleaved: bool,
    limit: float | None,
    alpha: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward's gated-unit block for one segment, in plain torch (what inductor compiles).

    ``segment``: the saved pre-activations ``[n, 2I]``; ``grad_weighted``: the gradient of the routing-weighted
    activations ``[n, I]``; ``weight``: the routing weights ``[n, 1]``. Returns the gradient of the
    pre-activations ``[n, 2I]`` (same column order as ``segment``), the weighted activations ``[n, I]`` and each
    row's routing-weight gradient ``[n]`` (``sum(grad_weighted * unit)``). The units are those with a written-out
    derivative (``expert_units.has_unit``): SiLU, clamped at ``limit`` or not, and gpt_oss's (``alpha``).
    """
    gate, up = split_gate_up(segment, interleaved)
    gate_in = gate if limit is None else gate.clamp(max=limit)
    up_in = up if limit is None else up.clamp(min=-limit, max=limit)
    if alpha is None:  # SiLU(g) * up
        sigmoid = torch.sigmoid(gate_in)
        factor = up_in
        slope = sigmoid * (1 + gate_in * (1 - sigmoid))
    else:  # gpt_oss: (up + 1) * g * sigmoid(alpha g)
        sigmoid = torch.sigmoid(gate_in * alpha)
        factor = up_in + 1
        slope = sigmoid * (1 + alpha * gate_in * (1 - sigmoid))
    gate_value = gate_in * sigmoid
    value = gate_value * factor
    pair = (grad_weighted * value).sum(dim=-1)
    grad_activated = grad_weighted * weight
    grad_gate = grad_activated * factor * slope
    grad_up = grad_activated * gate_value
    if limit is not None:  # a clamp passes the gradient where it left its input as it was (NaN: it did not)
        grad_gate = torch.where(gate_in == gate, grad_gate, 0)
        grad_up = torch.where(up_in == up, grad_up, 0)
    if interleaved:
        grad_gate_up = torch.stack((grad_gate, grad_up), dim=-1).flatten(-2)
    else:
        grad_gate_up = torch.cat((grad_gate, grad_up), dim=-1)
    return grad_gate_up, value * weight, pair


class CompiledUnit:
    """:func:`unit_gradients` for one set of options, compiled by inductor on its first call.

    Satisfies ``grouped_experts.UnitGradients``: the backward loop asks :meth:`accepts` for each segment and
    calls it for those it accepts.
    """

    def __init__(self, name: str, interleaved: bool, limit: float | None, alpha: float | None) -> None:
        self.options = (interleaved, limit, alpha)
        self.function = torch.compile(own_code(unit_gradients, name), dynamic=False, fullgraph=True)

    def accepts(self, segment: torch.Tensor, weight: torch.Tensor) -> bool:
        """Segments that the one compiled graph serves: two rows or more, neither view at storage offset 0 or 1."""
        return segment.shape[0] >= 2 and segment.storage_offset() >= 2 and weight.storage_offset() >= 2

    def __call__(
        self, segment: torch.Tensor, grad_weighted: torch.Tensor, weight: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if torch.compiler.is_compiling():  # traced by an outer compile: plain torch, for its graph to compile
            return unit_gradients(segment, grad_weighted, weight, *self.options)
        for tensor in (segment, grad_weighted, weight):
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
        # No autograd inside (the operator's backward computes gradients by hand); without it, one graph
        # serves callers with grad mode on and off.
        with torch.no_grad():
            return self.function(segment, grad_weighted, weight, *self.options)


_UNITS: dict[tuple[Any, ...], CompiledUnit] = {}
_UNITS_LOCK = threading.Lock()


def compiled_unit(
    dtype: torch.dtype, width: int, activation: str, interleaved: bool, limit: float | None, alpha: float | None
) -> CompiledUnit | None:
    """The :class:`CompiledUnit` of these options (made on first use), or None for a unit without a written-out
    derivative (GELU, ReLU, ...: ``grouped``'s eager loop takes it through ``torch.func.vjp``).

    ``width`` is the pre-activations' (2I): the graph is static in it, so models of other widths get units of
    their own rather than graphs that count toward one code object's recompile limit. The device is not part of
    the key: dynamo guards on it, and this family runs on CPUs.
    """
    if not has_unit(activation, alpha=alpha):
        return None
    key = (dtype, width, interleaved, limit, alpha)
    unit = _UNITS.get(key)
    if unit is None:
        with _UNITS_LOCK:
            unit = _UNITS.get(key)
            if unit is None:
                unit = _UNITS[key] = CompiledUnit(f"unit{len(_UNITS)}", interleaved, limit, alpha)
    return unit


_OPERATORS = define_operators(FORWARD_OP, BACKWARD_OP, unit_factory=compiled_unit)


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
    counts: Sequence[int] | None = None,
) -> torch.Tensor:
    """``moe_experts`` slot contract (``modelgraft.models.ops.kernels.eager.moe_experts``): ``grouped``'s kernel with
    its backward's gated-unit block compiled by inductor.

    ``counts``: as ``grouped_experts.moe_experts`` takes them (the pairs per expert as host ints, when the caller
    has them).
    """
    return run_experts(
        _OPERATORS.forward,
        hidden_states,
        top_k_index,
        top_k_weights,
        gate_up_proj,
        down_proj,
        activation,
        layout=layout,
        interleaved=interleaved,
        gate_up_bias=gate_up_bias,
        down_bias=down_bias,
        limit=limit,
        alpha=alpha,
        activation_first=activation_first,
        counts=counts,
    )
