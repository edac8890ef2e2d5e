"""Reference kernels of the linear-attention slots (Qwen3.5's Gated DeltaNet), re-exported by ``eager``.

Each recomputes upstream's torch formula from the arguments the guard hands its slot, so a dropped or swapped
argument (the gate, eps, the activation, the conv bias, beta, the decay, the L2 norm switch, the initial state)
changes the result. Both gated delta rules follow upstream's torch functions statement by statement, grouped
value attention included (q and k come with the key heads, :func:`grouped_query_key`), so they round as
upstream does. Like upstream's torch bodies, these ignore ``cu_seqlens`` (docs/design.md, "Where the code
departs from the design contract").
"""

from __future__ import annotations

from functools import cache

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "causal_conv1d",
    "causal_conv1d_update",
    "chunk_gated_delta_rule",
    "fp32_heads_first",
    "grouped_query_key",
    "l2_normalized",
    "recurrent_gated_delta_rule",
    "rms_norm_gated",
]


@cache
def _activation(name: str) -> nn.Module:
    from transformers.activations import ACT2FN

    return ACT2FN[name]


def rms_norm_gated(
    hidden_states: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float, *, activation: str = "silu"
) -> torch.Tensor:
    """Normalise in fp32, cast back, scale by ``weight``, multiply by the fp32 activated gate, cast back."""
    input_dtype = hidden_states.dtype
    x = hidden_states.float()
    normed = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).to(input_dtype)
    return (weight * normed * _activation(activation)(gate.float())).to(input_dtype)


def _activated(out: torch.Tensor, activation: str | None) -> torch.Tensor:
    return out if activation is None else _activation(activation)(out)


def causal_conv1d(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
    *,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Depthwise conv over ``K - 1`` zeros then the input, in the weight's dtype; ``cu_seqlens`` is ignored."""
    del cu_seqlens  # upstream's torch path reads no document boundaries
    seq_len = hidden_states.shape[-1]
    padded = F.pad(hidden_states.to(weight.dtype), (weight.shape[-1] - 1, 0))
    out = F.conv1d(padded, weight.unsqueeze(1), bias, groups=weight.shape[0])
    return _activated(out[..., :seq_len], activation).to(hidden_states.dtype)


def causal_conv1d_update(
    hidden_states: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
) -> torch.Tensor:
    """The conv over the cached inputs then the new ones; the cache keeps the last ``state_len`` inputs, in place."""
    seq_len, state_len = hidden_states.shape[-1], conv_state.shape[-1]
    window = torch.cat([conv_state, hidden_states], dim=-1).to(weight.dtype)
    conv_state.copy_(window[..., -state_len:])
    out = F.conv1d(window, weight.unsqueeze(1), bias, groups=weight.shape[0])[..., -seq_len:]
    return _activated(out, activation).to(hidden_states.dtype)


def l2_normalized(x: torch.Tensor) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + 1e-6)`` over the last axis (upstream's ``l2norm``, FLA's convention)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def grouped_query_key(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k ``[B, T, Hk, K]`` with each head repeated for the ``H / Hk`` consecutive value heads it serves.

    Upstream's grouped value attention: its mixer hands the delta rule q and k with the key heads and v, g, beta
    with the value heads, and the function repeats q and k itself (``repeat_interleave`` on the head axis), so
    every kernel of the delta-rule slots does the same before computing per value head.
    """
    key_heads, value_heads = key.shape[2], value.shape[2]
    if key_heads == value_heads:
        return query, key
    if query.shape[2] != key_heads or value_heads % key_heads:
        raise ValueError(
            f"grouped value attention needs q and k with the same heads, a divisor of the value heads; got q "
            f"{query.shape[2]}, k {key_heads}, v {value_heads} heads"
        )
    repeats = value_heads // key_heads
    return query.repeat_interleave(repeats, dim=2), key.repeat_interleave(repeats, dim=2)


def fp32_heads_first(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    *,
    l2norm: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Upstream's preamble of both delta rules: q and k repeated to the value heads, every input moved to
    ``[B, H, T, ...]`` and cast to fp32 (contiguous), then q and k L2-normalised there when asked."""
    query, key = grouped_query_key(query, key, value)
    q, k, v, b, decay = (
        x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)
        for x in (query, key, value, beta, g)
    )
    if l2norm:
        q, k = l2_normalized(q), l2_normalized(k)
    return q, k, v, b, decay


def chunk_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Upstream's chunked gated delta rule, in upstream's order of operations (so its roundings too).

    q and k repeated to the value heads, everything cast to fp32, q and k L2-normalised there, q scaled; per
    chunk of ``chunk_size`` tokens the pairwise decays ``exp(cumsum_i - cumsum_j)`` (-inf above the diagonal
    before the exp), the unit lower-triangular system ``I + M`` (M the strictly lower ``beta k k^T`` times those
    decays) solved for the corrected values and the decayed keys (``torch.linalg.solve_triangular``; under
    ``torch.export`` upstream inverts it by forward substitution row by row instead, and so does this), then
    the chunk's outputs from the state carried in and the state carried out. A model's MoE router turns any
    other order's rounding into other experts in bf16, hence this order here.
    """
    del cu_seqlens  # upstream's torch path reads no document boundaries
    input_dtype = query.dtype
    batch, _, _, k_dim = key.shape
    heads, v_dim = value.shape[-2:]
    q, k, v, b, decay = fp32_heads_first(query, key, value, beta, g, l2norm=use_qk_l2norm_in_kernel)
    q = q * q.shape[-1] ** -0.5
    length = k.shape[2]
    pad = (chunk_size - length % chunk_size) % chunk_size
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    b, decay = (F.pad(x, (0, pad)) for x in (b, decay))
    v_beta, k_beta = v * b.unsqueeze(-1), k * b.unsqueeze(-1)
    q, k, k_beta, v_beta = (
        x.reshape(x.shape[0], x.shape[1], -1, chunk_size, x.shape[-1]) for x in (q, k, k_beta, v_beta)
    )
    decay = decay.reshape(decay.shape[0], decay.shape[1], -1, chunk_size)
    strictly_upper = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).triu(1)
    cum_decay = decay.cumsum(dim=3)
    pairwise_decay = (cum_decay.unsqueeze(4) - cum_decay.unsqueeze(3)).masked_fill(strictly_upper, float("-inf")).exp()
    system = (k_beta @ k.transpose(-1, -2)) * pairwise_decay
    attn = (q @ k.transpose(-1, -2)) * pairwise_decay
    decayed_k_beta = k_beta * cum_decay.exp().unsqueeze(-1)
    if not torch.compiler.is_exporting():
        v = torch.linalg.solve_triangular(system, v_beta, upper=False, unitriangular=True)
        k_cumdecay = torch.linalg.solve_triangular(system, decayed_k_beta, upper=False, unitriangular=True)
    else:
        system = -system.tril(-1)
        for row in range(1, chunk_size):
            coefficients = system[..., row, :row].clone()
            solved = system[..., :row, :row].clone()
            system[..., row, :row] = coefficients + (coefficients.unsqueeze(-1) * solved).sum(-2)
        system = system + torch.eye(chunk_size, dtype=system.dtype, device=system.device)
        v, k_cumdecay = system @ v_beta, system @ decayed_k_beta
    state = (
        torch.zeros(batch, heads, k_dim, v_dim, dtype=v.dtype, device=v.device)
        if initial_state is None
        else initial_state.to(v)
    )
    out = torch.zeros_like(v)
    q = q * cum_decay.exp().unsqueeze(-1)
    k = k * (cum_decay[..., -1:] - cum_decay).exp().unsqueeze(-1)
    chunk_decay = cum_decay[..., -1].exp()[..., None, None]
    for i in range(q.shape[2]):
        v_new = v[:, :, i] - k_cumdecay[:, :, i] @ state
        out[:, :, i] = q[:, :, i] @ state + attn[:, :, i] @ v_new
        state = state * chunk_decay[:, :, i] + k[:, :, i].transpose(-1, -2) @ v_new
    out = out.reshape(batch, heads, -1, v_dim)[:, :, :length]
    return out.transpose(1, 2).to(input_dtype, memory_format=torch.contiguous_format), (
        state if output_final_state else None
    )


def recurrent_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Upstream's recurrent gated delta rule (one-token decode steps), in upstream's order of operations.

    q and k repeated to the value heads, everything cast to fp32, q and k L2-normalised there, q divided by
    ``sqrt(K)``; then per token: S <- S * exp(g); S <- S + k (beta (v - S^T k))^T; out = S^T q.
    """
    del cu_seqlens  # upstream's torch path reads no document boundaries
    input_dtype = query.dtype
    batch, _, _, k_dim = key.shape
    heads, v_dim = value.shape[-2:]
    q, k, v, b, decay = fp32_heads_first(query, key, value, beta, g, l2norm=use_qk_l2norm_in_kernel)
    q = q / (q.shape[-1] ** 0.5)
    state = (
        torch.zeros(batch, heads, k_dim, v_dim, dtype=v.dtype, device=v.device)
        if initial_state is None
        else initial_state.to(v)
    )
    out = torch.zeros_like(v)
    for t in range(k.shape[2]):
        q_t, k_t, v_t = q[:, :, t], k[:, :, t], v[:, :, t]
        state = state * decay[:, :, t].exp()[..., None, None]
        delta = (v_t - (state * k_t.unsqueeze(-1)).sum(dim=-2)) * b[:, :, t].unsqueeze(-1)
        state = state + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        out[:, :, t] = (state * q_t.unsqueeze(-1)).sum(dim=-2)
    return out.transpose(1, 2).contiguous().to(input_dtype), state if output_final_state else None
