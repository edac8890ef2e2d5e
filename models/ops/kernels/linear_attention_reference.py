"""Reference kernels of the linear-attention slots (Qwen3.5's Gated DeltaNet), re-exported by ``eager``.

Each recomputes upstream's torch formula from the arguments the guard hands its slot, so a dropped or swapped
argument (the gate, eps, the activation, the conv bias, beta, the decay, the L2 norm switch, the initial state)
changes the result. The chunked gated delta rule follows upstream's order of operations; the recurrent one is
the token-by-token recurrence (:func:`gated_delta_recurrence`), which the chunked one regroups into chunks. Like upstream's torch path, these ignore ``cu_seqlens``
(docs/design.md, "Where the code departs from the design contract").
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
    "gated_delta_recurrence",
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


def gated_delta_recurrence(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None,
    use_qk_l2norm_in_kernel: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule token by token, in fp32: (out [B, T, H, V] fp32, final state [B, H, K, V]).

    Per token: S <- S * exp(g); S <- S + k (beta (v - S^T k))^T; out = S^T (q / sqrt(K)).
    """
    if use_qk_l2norm_in_kernel:
        query, key = l2_normalized(query), l2_normalized(key)
    q, k, v, b, decay = (x.float() for x in (query, key, value, beta, g))
    batch, length, heads, k_dim = k.shape
    q = q * k_dim**-0.5
    state = (
        torch.zeros(batch, heads, k_dim, v.shape[-1], dtype=torch.float32, device=v.device)
        if initial_state is None
        else initial_state.float()
    )
    outs = []
    for t in range(length):
        state = state * decay[:, t].exp()[..., None, None]
        delta = (v[:, t] - torch.einsum("bhkv,bhk->bhv", state, k[:, t])) * b[:, t, :, None]
        state = state + k[:, t, :, :, None] * delta[:, :, None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    out = torch.stack(outs, dim=1) if outs else v.new_zeros(batch, 0, heads, v.shape[-1])
    return out, state


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

    Per chunk of ``chunk_size`` tokens, in fp32: the within-chunk system ``(I + M)`` (M the strictly lower
    ``beta k k^T`` times the decay between positions) inverted by forward substitution row by row, then the
    chunk's outputs from the state carried in and the corrected values, and the state carried out. The
    token-by-token recurrence (:func:`gated_delta_recurrence`) is the same function in another order; a model's
    MoE router turns the rounding difference between the two into other experts in bf16, hence this order here.
    """
    del cu_seqlens  # upstream's torch path reads no document boundaries
    input_dtype = query.dtype
    if use_qk_l2norm_in_kernel:
        query, key = l2_normalized(query), l2_normalized(key)
    q, k, v, b, decay = (x.transpose(1, 2).contiguous().to(torch.float32) for x in (query, key, value, beta, g))
    batch, heads, length, k_dim = k.shape
    pad = (chunk_size - length % chunk_size) % chunk_size
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    b, decay = F.pad(b, (0, pad)), F.pad(decay, (0, pad))
    q = q * (1 / (q.shape[-1] ** 0.5))
    v_beta, k_beta = v * b.unsqueeze(-1), k * b.unsqueeze(-1)
    q, k, v, k_beta, v_beta = (
        x.reshape(x.shape[0], x.shape[1], -1, chunk_size, x.shape[-1]) for x in (q, k, v, k_beta, v_beta)
    )
    decay = decay.reshape(decay.shape[0], decay.shape[1], -1, chunk_size).cumsum(dim=-1)
    decay_mask = ((decay.unsqueeze(-1) - decay.unsqueeze(-2)).tril().exp().float()).tril()
    upper = torch.triu(torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device), diagonal=0)
    system = -((k_beta @ k.transpose(-1, -2)) * decay_mask).masked_fill(upper, 0)
    for row in range(1, chunk_size):
        coefficients = system[..., row, :row].clone()
        solved = system[..., :row, :row].clone()
        system[..., row, :row] = coefficients + (coefficients.unsqueeze(-1) * solved).sum(-2)
    system = system + torch.eye(chunk_size, dtype=system.dtype, device=system.device)
    v = system @ v_beta
    k_cumdecay = system @ (k_beta * decay.exp().unsqueeze(-1))
    state = (
        torch.zeros(batch, heads, k_dim, v.shape[-1], dtype=v.dtype, device=v.device)
        if initial_state is None
        else initial_state.to(v)
    )
    out = torch.zeros_like(v)
    for i in range(q.shape[2]):
        q_i, k_i, g_i = q[:, :, i], k[:, :, i], decay[:, :, i]
        attn = q_i @ k_i.transpose(-1, -2) * decay_mask[:, :, i]
        v_new = v[:, :, i] - k_cumdecay[:, :, i] @ state
        out[:, :, i] = (q_i * g_i[:, :, :, None].exp()) @ state + attn @ v_new
        state = (
            state * g_i[:, :, -1, None, None].exp()
            + (k_i * (g_i[:, :, -1, None] - g_i).exp()[..., None]).transpose(-1, -2) @ v_new
        )
    out = out.reshape(out.shape[0], out.shape[1], -1, out.shape[-1])[:, :, :length]
    return out.transpose(1, 2).contiguous().to(input_dtype), state if output_final_state else None


def recurrent_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    initial_state: torch.Tensor | None,
    output_final_state: bool,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Upstream's recurrent gated delta rule (one-token decode steps)."""
    del cu_seqlens
    out, state = gated_delta_recurrence(query, key, value, g, beta, initial_state, use_qk_l2norm_in_kernel)
    return out.to(query.dtype), state if output_final_state else None
