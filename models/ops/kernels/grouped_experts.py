"""Routed experts as grouped matmuls over the fused layout (pure torch, any device, autograd as usual).

The eager reference (upstream's loop) builds a ``[E, K, tokens]`` one-hot mask and scans it once per
expert to find that expert's tokens. Here the ``tokens * K`` (token, expert) pairs are sorted by
expert once, so every expert's rows are one contiguous segment: one gather of the inputs, one
``[n_e, H] x [H, 2I]`` and one ``[n_e, I] x [I, H]`` matmul per expert that received tokens, one
un-permute, and a sum over the K choices of each token (no ``index_add_``, so the result does not
depend on the order atomics land in on a GPU).

Numerics: the same products as eager, summed over a token's K experts in routing order instead of
expert order, so results match eager within fp32 reassociation (``KERNEL_TOLERANCE``), not bitwise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from models.ops.kernels.eager import _activation


def moe_experts(
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    activation: str,
) -> torch.Tensor:
    """``moe_experts`` slot contract (see ``models.ops.kernels.eager.moe_experts``), grouped by expert."""
    num_tokens, top_k = top_k_index.shape
    num_experts = gate_up_proj.shape[0]
    flat_experts = top_k_index.reshape(-1)
    counts = torch.bincount(flat_experts, minlength=num_experts).tolist()  # the one host sync per call
    if len(counts) > num_experts:
        raise ValueError(f"top_k_index holds expert id {len(counts) - 1}, but there are {num_experts} experts")

    # Pair s = token * K + k; sorted by expert, stably, so each segment keeps token order.
    order = torch.argsort(flat_experts, stable=True)
    rows = hidden_states[order // top_k]

    act_fn = _activation(activation)
    segments = []
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        segment = rows[start : start + count]
        gate, up = F.linear(segment, gate_up_proj[expert]).chunk(2, dim=-1)
        segments.append(F.linear(act_fn(gate) * up, down_proj[expert]))
        start += count
    if not segments:
        return torch.zeros_like(hidden_states)

    outputs = torch.cat(segments) * top_k_weights.reshape(-1)[order].unsqueeze(-1)
    # Back to pair order, then each token's K contributions summed.
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    per_pair = outputs[inverse].view(num_tokens, top_k, -1)
    return per_pair.sum(dim=1).to(hidden_states.dtype)
