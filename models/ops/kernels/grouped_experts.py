"""Routed experts, one expert-sorted segment at a time, with a hand-written backward (pure torch).

Upstream's eager loop builds a ``[E, K, tokens]`` one-hot mask, scans it once per expert, and indexes
``gate_up_proj[e]`` under autograd, so every visited expert allocates a whole ``[E, 2I, H]`` zero
gradient (quadratic in E). Upstream's ``grouped_mm`` sorts the (token, expert) pairs and runs
``torch.nn.functional.grouped_mm``, but around the matmuls it allocates a dozen ``[S, H]`` buffers
(``S = tokens * K``: the gathered rows, sentinel masks, the weighted outputs, the un-permute, and
autograd's saved copies and gradients of each), and on CPU every fresh buffer of that size is new
pages from the kernel: its first touch costs about as much as a copy (measured: a 32 MiB ``clone``
takes as long as a 32 MiB ``index_select``).

Here the ``tokens * K`` pairs are sorted by expert once (stably), so every expert's pairs are one
contiguous segment, and the layer runs segment by segment:

- forward, per expert: gather its rows (``index_select``), ``[n_e, H] x [H, 2I]`` written in place
  into the one saved ``[S, 2I]`` pre-activation buffer (plus bias), the gated unit, the routing
  weight applied to the ``[n_e, I]`` activations (``(w a) W = w (a W)``, cheaper than scaling
  ``[n_e, H]`` outputs when ``I < H``), ``[n_e, I] x [I, H]``, and ``index_add_`` onto its tokens;
- backward, per expert: the same, in reverse: two matmuls per projection, the gated unit's derivative
  (written out for SiLU, clamped or not, and gpt_oss's unit: ``modelgraft.models.ops.kernels.expert_units``; by
  ``torch.func.vjp`` on a recomputation for other activations), weight gradients written straight into their
  ``[E, ...]`` buffers, ``index_add_`` of the input gradient.

Every temporary is one expert's size (``[n_e, H]``), so it comes from the allocator's free lists and
stays in cache; the only ``[S, ...]`` buffer is the saved pre-activations. The forward unit runs in
place on its first temporary (``expert_units.gated_value``), and the per-expert views (token ids,
segments, routing weights, weight matrices, gradient slices) are made by one ``split`` or ``unbind``
each, not by a slice per expert: at E=32 the loops' Python and dispatch cost is a few ms of a
130 ms layer step, about what the matmuls' cold operands cost on top of their in-cache rate
(docs/performance.md, "Where the time goes"). Within one segment a token
appears once, so ``index_add_`` has no duplicate indices (deterministic on GPUs too), and each token's
K contributions are added in expert order, as the eager reference adds them.

Why two custom operators (``torch.ops.modelgraft.grouped_experts_fwd`` and ``..._bwd``, defined with
``torch.library.custom_op``, their autograd formula joined by ``register_autograd``): traceable, with no
host sync inside the graph. The segments are sized by the routing, so the loops need each expert's row
count as host ints, read with one ``bincount(...).tolist()``. Traced by ``torch.compile`` as the plain
``autograd.Function`` this kernel was, that read is a data-dependent shape: ``torch._dynamo.explain``
counted six graph breaks in every sparse decoder layer of the zoo (at the ``bincount``, and at an
``out=`` into a strided half in the backward's gated unit). As operators whose fake implementations give
every output's shape from the input shapes alone, the forward and the backward are one opaque node each:
dynamo traces a sparse layer as one graph (``fullgraph=True``), AOTAutograd puts the backward operator in
the backward graph, and inductor compiles the code around them. The host read stays inside the forward
operator, where no graph sees it, and the backward makes none: the forward hands it the per-expert counts
as a small CPU tensor (or the caller's own ``counts``). Both are tagged ``cudagraph_unsafe``: their work
is sized by host ints that change from batch to batch, which a replayed CUDA graph would not see. Called
eagerly, the operators run the same loops as before, with the same numerics, to the bit.

The operators are made by :func:`define_operators`, which also makes the ``grouped_compiled`` family's pair
(``modelgraft.models.ops.kernels.compiled_experts``): the same loops, with the backward's gated-unit block
handed to a function inductor compiled. Autograd does not materialize zero gradients for the forward
operator's four outputs that no caller sees (``set_materialize_grads(False)``): it used to fill a
``[S, 2I]`` zero tensor per layer and step that the backward never read (25 MiB at E=64, k=8, I=192).

Numerics: the eager reference's products, but the routing weight multiplies the activations before
the down projection (fp32 reassociation), so results match within ``KERNEL_TOLERANCE`` in fp32 and
a bf16 tolerance in bf16, not bitwise (tests/runtime/test_moe_kernels.py and
tests/runtime/test_grouped_experts_layouts.py); compiled, they match the eager kernel
(tests/compile/).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from modelgraft.models.ops.kernels.eager import check_moe_experts_options, experts_glu, split_gate_up
from modelgraft.models.ops.kernels.expert_units import GatedUnit, gated_value, has_unit

__all__ = [
    "BACKWARD_OP",
    "FORWARD_OP",
    "ExpertsOperators",
    "UnitGradients",
    "define_operators",
    "moe_experts",
    "run_experts",
]

#: The operators' qualified names, as ``torch.ops`` and compiled graphs show them.
FORWARD_OP = "modelgraft::grouped_experts_fwd"
BACKWARD_OP = "modelgraft::grouped_experts_bwd"


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
    """``moe_experts`` slot contract (see ``modelgraft.models.ops.kernels.eager.moe_experts``), grouped by expert.

    ``counts`` (not part of the slot contract): the (token, expert) pairs per expert, as host ints, when the
    caller already has them on the host. The kernel then makes no host sync of its own; expert parallelism
    passes them, read in the dispatch's one sync (``modelgraft.models.distributed.expert_parallel``).
    Without them the kernel counts on the device and reads the counts in one sync, inside its forward
    operator (so a compiled graph holds no data-dependent shape).
    """
    return run_experts(
        _GROUPED.forward,
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


def run_experts(
    forward: Callable[..., tuple[torch.Tensor, ...]],
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    activation: str,
    *,
    layout: str,
    interleaved: bool,
    gate_up_bias: torch.Tensor | None,
    down_bias: torch.Tensor | None,
    limit: float | None,
    alpha: float | None,
    counts: Sequence[int] | None,
    activation_first: bool = False,
) -> torch.Tensor:
    """Check the slot's arguments and run them through ``forward``, a forward operator of :func:`define_operators`.

    Every family built on these operators takes its arguments the same way, so each checks them here.
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
    if counts is not None:
        counts = [int(count) for count in counts]
        if len(counts) != num_experts or sum(counts) != top_k_index.numel():
            raise ValueError(
                f"counts {counts} do not describe {top_k_index.numel()} (token, expert) pairs over {num_experts} experts"
            )
    if top_k_index.shape[0] == 0:
        return torch.zeros_like(hidden_states)
    out, *_ = forward(
        hidden_states,
        top_k_index,
        top_k_weights,
        gate_up_proj,
        down_proj,
        gate_up_bias,
        down_bias,
        activation,
        layout == "transposed",
        interleaved,
        limit,
        alpha,
        activation_first,
        counts,
    )
    return out


class UnitGradients(Protocol):
    """The backward's gated-unit block for one expert segment, as a family other than ``grouped`` computes it.

    From the segment's saved pre-activations ``[n, 2I]``, the gradient of the routing-weighted activations
    ``[n, I]`` and the routing weights ``[n, 1]``: the gradient of the pre-activations ``[n, 2I]`` (gate and up
    in the segment's column order), the weighted activations ``[n, I]`` (the down projection's input, for its
    weight gradient) and each row's routing-weight gradient ``[n]`` (the down bias's share left out).
    """

    def accepts(self, segment: torch.Tensor, weight: torch.Tensor) -> bool:
        """Whether this segment goes through it; the kernel's own eager unit computes those it declines."""
        ...

    def __call__(
        self, segment: torch.Tensor, grad_weighted: torch.Tensor, weight: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


#: Gives a family's :class:`UnitGradients` for one call's options (dtype, the pre-activations' width 2I, activation,
#: interleaved, limit, alpha), or None where it has none (the kernel's eager unit then computes every segment).
UnitFactory = Callable[[torch.dtype, int, str, bool, "float | None", "float | None"], "UnitGradients | None"]


class _Plan:
    """Everything about one call that is not a differentiable tensor: the routing order and the options.

    ``tokens`` holds every expert's token ids (empty for experts that got none), split once here so the
    loops below index a tuple instead of slicing tensors; ``visited`` lists the experts with rows.
    """

    __slots__ = (
        "activation",
        "activation_first",
        "alpha",
        "counts",
        "interleaved",
        "limit",
        "order",
        "tokens",
        "transposed",
        "visited",
    )

    def __init__(
        self,
        order: torch.Tensor,
        counts: list[int],
        top_k: int,
        *,
        activation: str,
        transposed: bool,
        interleaved: bool,
        limit: float | None,
        alpha: float | None,
        activation_first: bool,
    ) -> None:
        self.order = order
        self.counts = counts
        self.visited = [expert for expert, count in enumerate(counts) if count]
        self.tokens = (order // top_k).split(counts)
        self.activation = activation
        self.transposed = transposed
        self.interleaved = interleaved
        self.limit = limit
        self.alpha = alpha
        self.activation_first = activation_first

    def forward_weights(self, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Every expert's ``[in, out]`` matrix (``rows @ m`` is its projection), as views made in one call."""
        return (weight if self.transposed else weight.transpose(1, 2)).unbind(0)

    def backward_weights(self, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Every expert's ``[out, in]`` matrix: ``grad @ m`` is the gradient of the projection's input."""
        return (weight.transpose(1, 2) if self.transposed else weight).unbind(0)

    def weight_grad(self, out: torch.Tensor, inputs: torch.Tensor, grad: torch.Tensor) -> None:
        """Write one expert's weight gradient into ``out`` (its ``[E, ...]`` slice, stored layout)."""
        if self.transposed:  # y = x @ W[e]
            torch.mm(inputs.t(), grad, out=out)
        else:  # y = x @ W[e].T
            torch.mm(grad.t(), inputs, out=out)


def _unbind(buffer: torch.Tensor | None) -> tuple[torch.Tensor, ...] | None:
    return None if buffer is None else buffer.unbind(0)


def _two_i(gate_up_proj: torch.Tensor, transposed: bool) -> int:
    return gate_up_proj.shape[2] if transposed else gate_up_proj.shape[1]


# -- the forward operator ------------------------------------------------------------------------------------
# Outputs: the layer's output [tokens, H]; what the backward needs and no caller sees: the pre-activations
# [S, 2I], the routing weights in pair order [S], the pair order [S] (int64), and the pairs per expert [E]
# (int64, on the CPU: the backward reads it without a device sync).
_FORWARD_SCHEMA = (
    "(Tensor hidden_states, Tensor top_k_index, Tensor top_k_weights, Tensor gate_up_proj, Tensor down_proj, "
    "Tensor? gate_up_bias, Tensor? down_bias, str activation, bool transposed, bool interleaved, float? limit, "
    "float? alpha, bool activation_first, int[]? counts) -> (Tensor, Tensor, Tensor, Tensor, Tensor)"
)


def _forward(
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    gate_up_bias: torch.Tensor | None,
    down_bias: torch.Tensor | None,
    activation: str,
    transposed: bool,
    interleaved: bool,
    limit: float | None,
    alpha: float | None,
    activation_first: bool,
    counts: Sequence[int] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    top_k = top_k_index.shape[1]
    num_experts = gate_up_proj.shape[0]
    flat_experts = top_k_index.reshape(-1)
    if counts is None:
        counts = torch.bincount(flat_experts, minlength=num_experts).tolist()  # the one host sync per call
        if len(counts) > num_experts:
            raise ValueError(
                f"top_k_index holds expert id {len(counts) - 1}, but there are {num_experts} experts; if "
                "apply_expert_parallel kept this rank's experts only, the moe_experts slot must run 'ep_alltoall' "
                "(parallel_ops(state)), not this kernel"
            )
    else:
        counts = list(counts)
    # Pair s = token * K + k; sorted by expert, stably, so each segment keeps token order.
    order = torch.argsort(flat_experts, stable=True)
    plan = _Plan(
        order,
        counts,
        top_k,
        activation=activation,
        transposed=transposed,
        interleaved=interleaved,
        limit=limit,
        alpha=alpha,
        activation_first=activation_first,
    )
    routing = top_k_weights.reshape(-1).index_select(0, order).to(hidden_states.dtype)
    gate_up = hidden_states.new_empty(order.numel(), _two_i(gate_up_proj, transposed))
    out = torch.zeros_like(hidden_states)
    segments = gate_up.split(plan.counts)
    weights = routing.split(plan.counts)
    columns = routing.unsqueeze(-1).split(plan.counts)
    up_weights = plan.forward_weights(gate_up_proj)
    down_weights = plan.forward_weights(down_proj)
    by_hand = has_unit(activation, alpha=alpha, activation_first=activation_first)
    for expert in plan.visited:
        tokens = plan.tokens[expert]
        segment = segments[expert]
        torch.mm(hidden_states.index_select(0, tokens), up_weights[expert], out=segment)
        if gate_up_bias is not None:
            segment.add_(gate_up_bias[expert])
        gate, up = split_gate_up(segment, interleaved)
        if by_hand:
            weighted = gated_value(gate, up, limit=limit, alpha=alpha)
        else:
            weighted = experts_glu(gate, up, activation, limit=limit, alpha=alpha, activation_first=activation_first)
        rows = torch.mm(weighted.mul_(columns[expert]), down_weights[expert])
        if down_bias is not None:
            rows.addr_(weights[expert], down_bias[expert])
        out.index_add_(0, tokens, rows)
    return out, gate_up, routing, order, torch.tensor(counts, dtype=torch.long)


def _forward_fake(
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    gate_up_bias: torch.Tensor | None,
    down_bias: torch.Tensor | None,
    activation: str,
    transposed: bool,
    interleaved: bool,
    limit: float | None,
    alpha: float | None,
    activation_first: bool,
    counts: Sequence[int] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    pairs = top_k_index.numel()
    return (
        torch.empty_like(hidden_states),
        hidden_states.new_empty(pairs, _two_i(gate_up_proj, transposed)),
        hidden_states.new_empty(pairs),
        top_k_index.new_empty(pairs, dtype=torch.long),
        torch.empty(gate_up_proj.shape[0], dtype=torch.long, device="cpu"),
    )


# -- the backward operator -----------------------------------------------------------------------------------
# ``needs``: which of (hidden_states, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias) get a
# gradient; the others come back as empty tensors (an operator returns tensors, never None).
_BACKWARD_SCHEMA = (
    "(Tensor grad_output, Tensor hidden_states, Tensor top_k_weights, Tensor gate_up_proj, Tensor down_proj, "
    "Tensor? down_bias, Tensor gate_up, Tensor routing, Tensor order, Tensor counts, int[]? host_counts, "
    "str activation, bool transposed, bool interleaved, float? limit, float? alpha, bool activation_first, int top_k, "
    "bool[] needs) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)"
)


def _eager_unit(
    plan: _Plan,
    segment: torch.Tensor,
    grad_weighted: torch.Tensor,
    weight: torch.Tensor,
    pair: torch.Tensor | None,
    want_weighted: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The backward's gated-unit block for one segment, eagerly: (pre-activation gradient, weighted activations).

    Writes each row's routing-weight gradient into ``pair`` when given. ``grad_weighted`` is overwritten.
    """
    activation, interleaved, limit, alpha = plan.activation, plan.interleaved, plan.limit, plan.alpha
    activation_first = plan.activation_first
    by_hand = has_unit(activation, alpha=alpha, activation_first=activation_first)
    # Recompute the gated unit: with its written-out derivative, else with its vector-Jacobian product from
    # torch.func (autograd does not record inside an operator's implementation; torch.func's vjp does).
    gate, up = split_gate_up(segment, interleaved)
    if by_hand:
        unit = GatedUnit(gate, up, limit=limit, alpha=alpha)
        activated = unit.value
    else:
        activated, unit_vjp = torch.func.vjp(
            lambda gate, up: experts_glu(
                gate, up, activation, limit=limit, alpha=alpha, activation_first=activation_first
            ),
            gate,
            up,
        )
    values = activated.detach()
    if pair is not None:
        torch.sum(grad_weighted * values, dim=-1, out=pair)
    weighted = None
    if want_weighted:
        # By hand, `values` is a temporary spent after this (scaled in place); the vjp may share it.
        weighted = values.mul_(weight) if by_hand else values * weight
    grad_activated = grad_weighted.mul_(weight)
    if by_hand:  # straight into the two halves (or interleaved columns) of one [n, 2I] buffer
        grad_gate_up = torch.empty_like(segment)
        grad_gate, grad_up = split_gate_up(grad_gate_up, interleaved)
        unit.backward(grad_activated, grad_gate, grad_up)
    else:
        grad_gate, grad_up = unit_vjp(grad_activated)
        if interleaved:
            grad_gate_up = torch.stack((grad_gate, grad_up), dim=-1).flatten(-2)
        else:
            grad_gate_up = torch.cat((grad_gate, grad_up), dim=-1)
    return grad_gate_up, weighted


def _backward_loops(
    unit_factory: UnitFactory | None,
    grad_output: torch.Tensor,
    hidden_states: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    down_bias: torch.Tensor | None,
    gate_up: torch.Tensor,
    routing: torch.Tensor,
    order: torch.Tensor,
    counts: torch.Tensor,
    host_counts: Sequence[int] | None,
    activation: str,
    transposed: bool,
    interleaved: bool,
    limit: float | None,
    alpha: float | None,
    activation_first: bool,
    top_k: int,
    needs: Sequence[bool],
) -> tuple[torch.Tensor, ...]:
    plan = _Plan(
        order,
        list(host_counts) if host_counts is not None else counts.tolist(),  # a CPU tensor: no device sync
        top_k,
        activation=activation,
        transposed=transposed,
        interleaved=interleaved,
        limit=limit,
        alpha=alpha,
        activation_first=activation_first,
    )
    num_experts = gate_up_proj.shape[0]
    dtype = gate_up.dtype
    grad_output = grad_output.to(dtype)
    unit = (
        None
        if unit_factory is None or activation_first  # no written-out derivative: the eager unit's autograd
        else unit_factory(dtype, gate_up.shape[1], activation, interleaved, limit, alpha)
    )

    unvisited = sorted(set(range(num_experts)) - set(plan.visited))

    def expert_buffer(wanted: bool, like: torch.Tensor, *shape: int) -> torch.Tensor | None:
        # Written expert by expert below; experts that received no rows get zeros.
        if not wanted:
            return None
        buffer = like.new_empty(shape or like.shape)
        if unvisited:
            buffer[unvisited] = 0
        return buffer

    grad_hidden = torch.zeros_like(hidden_states) if needs[0] else None
    per_pair = routing.new_empty(routing.shape) if needs[1] else None
    grad_gate_up_proj = expert_buffer(needs[2], gate_up_proj)
    grad_down_proj = expert_buffer(needs[3], down_proj)
    grad_gate_up_bias = expert_buffer(needs[4], gate_up_proj, num_experts, gate_up.shape[1])
    grad_down_bias = expert_buffer(needs[5], down_proj, num_experts, hidden_states.shape[-1])

    # Per-expert views, each made by one call rather than one slice per expert in the loop.
    segments = gate_up.split(plan.counts)
    weights = routing.split(plan.counts)
    columns = routing.unsqueeze(-1).split(plan.counts)
    pairs = per_pair.split(plan.counts) if per_pair is not None else None
    up_weights = plan.backward_weights(gate_up_proj)
    down_weights = plan.backward_weights(down_proj)
    grad_up_weights, grad_down_weights = _unbind(grad_gate_up_proj), _unbind(grad_down_proj)
    grad_up_biases, grad_down_biases = _unbind(grad_gate_up_bias), _unbind(grad_down_bias)

    # Last expert first: the forward pass touched its weights and segment last, so some are still cached
    # (about 1% of the backward at E=32), and autograd's backward of the eager loop runs in this order too.
    for expert in reversed(plan.visited):
        tokens = plan.tokens[expert]
        weight = columns[expert]
        segment = segments[expert]
        grad_rows = grad_output.index_select(0, tokens)  # [n, H]
        if grad_down_biases is not None:
            torch.mv(grad_rows.t(), weights[expert], out=grad_down_biases[expert])
        # Gradient of the weighted activations, [n, I].
        grad_weighted = torch.mm(grad_rows, down_weights[expert])
        pair = pairs[expert] if pairs is not None else None
        if unit is not None and unit.accepts(segment, weight):
            grad_gate_up, weighted, pair_grad = unit(segment, grad_weighted, weight)
            if pair is not None:
                pair.copy_(pair_grad)
        else:
            grad_gate_up, weighted = _eager_unit(
                plan, segment, grad_weighted, weight, pair, grad_down_weights is not None
            )
        if pair is not None and down_bias is not None:
            pair += grad_rows @ down_bias[expert]
        if grad_down_weights is not None:
            plan.weight_grad(grad_down_weights[expert], weighted, grad_rows)
        del grad_rows, grad_weighted, weighted

        if grad_up_biases is not None:
            torch.sum(grad_gate_up, dim=0, out=grad_up_biases[expert])
        if grad_up_weights is not None:
            plan.weight_grad(grad_up_weights[expert], hidden_states.index_select(0, tokens), grad_gate_up)
        if grad_hidden is not None:
            grad_hidden.index_add_(0, tokens, torch.mm(grad_gate_up, up_weights[expert]))

    grad_weights = None
    if per_pair is not None:
        grad_weights = torch.empty_like(per_pair).index_copy_(0, order, per_pair)
        grad_weights = grad_weights.view(top_k_weights.shape).to(top_k_weights.dtype)
    grads = (grad_hidden, grad_weights, grad_gate_up_proj, grad_down_proj, grad_gate_up_bias, grad_down_bias)
    return tuple(hidden_states.new_empty(0) if grad is None else grad for grad in grads)


def _backward_fake(
    grad_output: torch.Tensor,
    hidden_states: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    down_bias: torch.Tensor | None,
    gate_up: torch.Tensor,
    routing: torch.Tensor,
    order: torch.Tensor,
    counts: torch.Tensor,
    host_counts: Sequence[int] | None,
    activation: str,
    transposed: bool,
    interleaved: bool,
    limit: float | None,
    alpha: float | None,
    activation_first: bool,
    top_k: int,
    needs: Sequence[bool],
) -> tuple[torch.Tensor, ...]:
    num_experts, hidden = gate_up_proj.shape[0], hidden_states.shape[-1]
    shapes = (
        (hidden_states, tuple(hidden_states.shape)),
        (top_k_weights, tuple(top_k_weights.shape)),
        (gate_up_proj, tuple(gate_up_proj.shape)),
        (down_proj, tuple(down_proj.shape)),
        (gate_up_proj, (num_experts, gate_up.shape[1])),
        (down_proj, (num_experts, hidden)),
    )
    return tuple(
        like.new_empty(shape) if wanted else hidden_states.new_empty(0)
        for wanted, (like, shape) in zip(needs, shapes, strict=True)
    )


# -- autograd: the forward operator's backward is the backward operator ---------------------------------------
def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias = inputs[:7]
    activation, transposed, interleaved, limit, alpha, activation_first, counts = inputs[7:]
    _, gate_up, routing, order, pair_counts = output
    ctx.mark_non_differentiable(gate_up, routing, order, pair_counts)
    # Only the layer's output has a gradient; without this, autograd would fill a zero [S, 2I] tensor (and three
    # small ones) per call for outputs the backward never reads.
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(
        hidden_states, top_k_weights, gate_up_proj, down_proj, down_bias, gate_up, routing, order, pair_counts
    )
    ctx.host_counts = None if counts is None else list(counts)
    ctx.options = (activation, transposed, interleaved, limit, alpha, activation_first, top_k_index.shape[1])
    ctx.has_gate_up_bias = gate_up_bias is not None


def _autograd_backward(backward: Callable[..., tuple[torch.Tensor, ...]]) -> Callable[..., tuple[Any, ...]]:
    """The forward operator's autograd formula: call ``backward``, the backward operator of the same pair."""

    def formula(ctx: Any, grad_output: torch.Tensor | None, *unused: torch.Tensor | None) -> tuple[Any, ...]:
        if grad_output is None:  # the output took no part in the loss
            return (None,) * 14
        saved = ctx.saved_tensors
        hidden_states, top_k_weights, gate_up_proj, down_proj, down_bias, gate_up, routing, order, pair_counts = saved
        activation, transposed, interleaved, limit, alpha, activation_first, top_k = ctx.options
        needs = ctx.needs_input_grad
        # Inputs: hidden_states, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias, ...
        wanted = [needs[0], needs[2], needs[3], needs[4], needs[5] and ctx.has_gate_up_bias, needs[6]]
        grads = backward(
            grad_output,
            hidden_states,
            top_k_weights,
            gate_up_proj,
            down_proj,
            down_bias,
            gate_up,
            routing,
            order,
            pair_counts,
            ctx.host_counts,
            activation,
            transposed,
            interleaved,
            limit,
            alpha,
            activation_first,
            top_k,
            wanted,
        )
        hidden, weights, gate_up_grad, down_grad, gate_up_bias_grad, down_bias_grad = (
            grad if flag else None for grad, flag in zip(grads, wanted, strict=True)
        )
        return (hidden, None, weights, gate_up_grad, down_grad, gate_up_bias_grad, down_bias_grad, *([None] * 7))

    return formula


@dataclass(frozen=True)
class ExpertsOperators:
    """A family's forward and backward operators (``torch.library`` custom operators), the first differentiable."""

    forward: Any
    backward: Any


def define_operators(forward_name: str, backward_name: str, unit_factory: UnitFactory | None) -> ExpertsOperators:
    """Define the forward and backward operators of one kernel family, named ``namespace::name`` each.

    Both run the loops of this module; ``unit_factory`` (None: the eager units throughout) gives the backward's
    gated-unit block for a call's options, which is how ``grouped_compiled`` hands it to inductor. Call once per
    name, at import of the family's module: defining an operator registers it with torch for the process.
    """

    def backward_impl(*args: Any) -> tuple[torch.Tensor, ...]:
        return _backward_loops(unit_factory, *args)

    tags = (torch.Tag.cudagraph_unsafe,)
    forward = torch.library.custom_op(forward_name, _forward, mutates_args=(), tags=tags, schema=_FORWARD_SCHEMA)
    forward.register_fake(_forward_fake)
    backward = torch.library.custom_op(
        backward_name, backward_impl, mutates_args=(), tags=tags, schema=_BACKWARD_SCHEMA
    )
    backward.register_fake(_backward_fake)
    forward.register_autograd(_autograd_backward(backward), setup_context=_setup_context)
    return ExpertsOperators(forward, backward)


_GROUPED = define_operators(FORWARD_OP, BACKWARD_OP, unit_factory=None)
