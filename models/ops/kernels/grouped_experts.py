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
contiguous segment, and one ``autograd.Function`` runs the layer segment by segment:

- forward, per expert: gather its rows (``index_select``), ``[n_e, H] x [H, 2I]`` written in place
  into the one saved ``[S, 2I]`` pre-activation buffer (plus bias), the gated unit, the routing
  weight applied to the ``[n_e, I]`` activations (``(w a) W = w (a W)``, cheaper than scaling
  ``[n_e, H]`` outputs when ``I < H``), ``[n_e, I] x [I, H]``, and ``index_add_`` onto its tokens;
- backward, per expert: the same, in reverse: two matmuls per projection, the gated unit's derivative
  (written out for SiLU, clamped or not, and gpt_oss's unit: ``models.ops.kernels.expert_units``; by
  autograd on a recomputation for other activations), weight gradients written straight into their
  ``[E, ...]`` buffers, ``index_add_`` of the input gradient.

Every temporary is one expert's size (``[n_e, H]``), so it comes from the allocator's free lists and
stays in cache; the only ``[S, ...]`` buffer is the saved pre-activations. Within one segment a token
appears once, so ``index_add_`` has no duplicate indices (deterministic on GPUs too), and each token's
K contributions are added in expert order, as the eager reference adds them.

Numerics: the eager reference's products, but the routing weight multiplies the activations before
the down projection (fp32 reassociation), so results match within ``KERNEL_TOLERANCE`` in fp32 and
a bf16 tolerance in bf16, not bitwise (tests/runtime/test_moe_kernels.py and
tests/runtime/test_grouped_experts_layouts.py).
"""

from __future__ import annotations

from typing import Any

import torch

from models.ops.kernels.eager import check_moe_experts_options, experts_glu, split_gate_up
from models.ops.kernels.expert_units import GatedUnit, has_unit

__all__ = ["moe_experts"]


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
) -> torch.Tensor:
    """``moe_experts`` slot contract (see ``models.ops.kernels.eager.moe_experts``), grouped by expert."""
    check_moe_experts_options(
        hidden_states,
        gate_up_proj,
        down_proj,
        layout=layout,
        gate_up_bias=gate_up_bias,
        down_bias=down_bias,
        limit=limit,
        alpha=alpha,
    )
    num_tokens, top_k = top_k_index.shape
    num_experts = gate_up_proj.shape[0]
    flat_experts = top_k_index.reshape(-1)
    counts = torch.bincount(flat_experts, minlength=num_experts).tolist()  # the one host sync per call
    if len(counts) > num_experts:
        raise ValueError(f"top_k_index holds expert id {len(counts) - 1}, but there are {num_experts} experts")
    if num_tokens == 0:
        return torch.zeros_like(hidden_states)

    # Pair s = token * K + k; sorted by expert, stably, so each segment keeps token order.
    order = torch.argsort(flat_experts, stable=True)
    segments, start = [], 0
    for expert, count in enumerate(counts):
        if count:
            segments.append((expert, start, start + count))
            start += count
    plan = _Plan(
        order=order,
        token_of=order // top_k,
        segments=segments,
        num_tokens=num_tokens,
        transposed=layout == "transposed",
        interleaved=interleaved,
        activation=activation,
        limit=limit,
        alpha=alpha,
    )
    return _GroupedExperts.apply(hidden_states, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias, plan)


class _Plan:
    """Everything about one call that is not a differentiable tensor: the routing order and the options."""

    __slots__ = (
        "activation",
        "alpha",
        "interleaved",
        "limit",
        "num_tokens",
        "order",
        "segments",
        "token_of",
        "transposed",
    )

    def __init__(self, **values: Any) -> None:
        for name, value in values.items():
            setattr(self, name, value)

    def forward_weight(self, weight: torch.Tensor, expert: int) -> torch.Tensor:
        """The ``[in, out]`` matrix of one expert: ``rows @ forward_weight`` is its projection."""
        return weight[expert] if self.transposed else weight[expert].t()

    def weight_grad(self, out: torch.Tensor, inputs: torch.Tensor, grad: torch.Tensor) -> None:
        """Write one expert's weight gradient into ``out`` (its ``[E, ...]`` slice, stored layout)."""
        if self.transposed:  # y = x @ W[e]
            torch.mm(inputs.t(), grad, out=out)
        else:  # y = x @ W[e].T
            torch.mm(grad.t(), inputs, out=out)


class _GroupedExperts(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden_states: torch.Tensor,
        top_k_weights: torch.Tensor,
        gate_up_proj: torch.Tensor,
        down_proj: torch.Tensor,
        gate_up_bias: torch.Tensor | None,
        down_bias: torch.Tensor | None,
        plan: _Plan,
    ) -> torch.Tensor:
        routing = top_k_weights.reshape(-1).index_select(0, plan.order).to(hidden_states.dtype)
        two_i = gate_up_proj.shape[2] if plan.transposed else gate_up_proj.shape[1]
        gate_up = hidden_states.new_empty(plan.order.numel(), two_i)  # pre-activations, saved for backward
        out = torch.zeros_like(hidden_states)
        for expert, start, end in plan.segments:
            tokens = plan.token_of[start:end]
            segment = gate_up[start:end]
            torch.mm(hidden_states.index_select(0, tokens), plan.forward_weight(gate_up_proj, expert), out=segment)
            if gate_up_bias is not None:
                segment.add_(gate_up_bias[expert])
            gate, up = split_gate_up(segment, plan.interleaved)
            weighted = experts_glu(gate, up, plan.activation, limit=plan.limit, alpha=plan.alpha)
            weighted.mul_(routing[start:end].unsqueeze(-1))
            rows = weighted @ plan.forward_weight(down_proj, expert)
            if down_bias is not None:
                rows.addr_(routing[start:end], down_bias[expert])
            out.index_add_(0, tokens, rows)
        ctx.save_for_backward(hidden_states, top_k_weights, gate_up_proj, down_proj, down_bias, gate_up, routing)
        ctx.plan = plan
        ctx.has_gate_up_bias = gate_up_bias is not None
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden_states, top_k_weights, gate_up_proj, down_proj, down_bias, gate_up, routing = ctx.saved_tensors
        plan: _Plan = ctx.plan
        needs = ctx.needs_input_grad
        num_experts = gate_up_proj.shape[0]
        dtype = gate_up.dtype
        grad_output = grad_output.to(dtype)

        unvisited = sorted(set(range(num_experts)) - {expert for expert, _, _ in plan.segments})

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
        by_hand = has_unit(plan.activation, alpha=plan.alpha)

        for expert, start, end in plan.segments:
            tokens = plan.token_of[start:end]
            weight = routing[start:end].unsqueeze(-1)
            grad_rows = grad_output.index_select(0, tokens)  # [n, H]
            # Recompute the gated unit: with its written-out derivative, else keeping its graph for autograd.
            if by_hand:
                gate, up = split_gate_up(gate_up[start:end], plan.interleaved)
                unit = GatedUnit(gate, up, limit=plan.limit, alpha=plan.alpha)
                activated = unit.value
            else:
                with torch.enable_grad():
                    gate, up = split_gate_up(gate_up[start:end].detach(), plan.interleaved)
                    gate.requires_grad_(True)
                    up.requires_grad_(True)
                    activated = experts_glu(gate, up, plan.activation, limit=plan.limit, alpha=plan.alpha)
            values = activated.detach()

            if grad_down_proj is not None:
                plan.weight_grad(grad_down_proj[expert], values * weight, grad_rows)
            if grad_down_bias is not None:
                torch.mv(grad_rows.t(), routing[start:end], out=grad_down_bias[expert])
            # Gradient of the weighted activations, [n, I].
            grad_weighted = grad_rows @ plan.forward_weight(down_proj, expert).t()
            if per_pair is not None:
                pair = per_pair[start:end]
                torch.sum(grad_weighted * values, dim=-1, out=pair)
                if down_bias is not None:
                    pair += grad_rows @ down_bias[expert]
            del grad_rows
            grad_activated = grad_weighted.mul_(weight)
            if by_hand:  # straight into the two halves (or interleaved columns) of one [n, 2I] buffer
                grad_gate_up = gate_up.new_empty(end - start, gate_up.shape[1])
                grad_gate, grad_up = split_gate_up(grad_gate_up, plan.interleaved)
                unit.backward(grad_activated, grad_gate, grad_up)
                del unit
            else:
                grad_gate, grad_up = torch.autograd.grad(activated, (gate, up), grad_activated)
                if plan.interleaved:
                    grad_gate_up = torch.stack((grad_gate, grad_up), dim=-1).flatten(-2)
                else:
                    grad_gate_up = torch.cat((grad_gate, grad_up), dim=-1)
            del activated, values, grad_activated, grad_gate, grad_up

            if grad_gate_up_bias is not None:
                torch.sum(grad_gate_up, dim=0, out=grad_gate_up_bias[expert])
            if grad_gate_up_proj is not None:
                rows = hidden_states.index_select(0, tokens)
                plan.weight_grad(grad_gate_up_proj[expert], rows, grad_gate_up)
            if grad_hidden is not None:
                grad_hidden.index_add_(0, tokens, grad_gate_up @ plan.forward_weight(gate_up_proj, expert).t())

        grad_weights = None
        if per_pair is not None:
            grad_weights = torch.empty_like(per_pair).index_copy_(0, plan.order, per_pair)
            grad_weights = grad_weights.view(top_k_weights.shape).to(top_k_weights.dtype)
        return grad_hidden, grad_weights, grad_gate_up_proj, grad_down_proj, grad_gate_up_bias, grad_down_bias, None
