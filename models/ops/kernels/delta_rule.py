"""The ``chunked_delta`` kernel family: a pure-torch CPU gated delta rule, and a causal conv1d, that honour
``cu_seqlens``.

Upstream's torch fallback of the chunked gated delta rule inverts each chunk's ``I + M`` (M the strictly lower
``beta k k^T`` with its decay) by forward substitution, one Python step per row of the chunk; this kernel solves
the same unit-triangular system with one ``torch.linalg.solve_triangular`` per layer call, and is otherwise
upstream's chunk recurrence (benchmarks/delta_rule.py measures both).

Packed documents: upstream's forward hands ``cu_seqlens`` to its kernels, and its torch fallbacks ignore them,
so on CPU a packed batch lets one document's state leak into the next. Here each document of a batch of one
runs from its own initial state (zeros, or row i of ``initial_state``) and its conv window starts from zeros, as
FLA's and causal-conv1d's GPU kernels do: a documented departure from upstream's eager path (docs/design.md,
"Where the code departs from the design contract"). Without ``cu_seqlens`` both compute upstream's formulas.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from modelgraft.models.ops.kernels.linear_attention_reference import causal_conv1d as _conv_whole
from modelgraft.models.ops.kernels.linear_attention_reference import l2_normalized

__all__ = ["causal_conv1d", "chunk_gated_delta_rule", "document_bounds"]


def document_bounds(cu_seqlens: torch.Tensor, batch_size: int, length: int) -> list[tuple[int, int]]:
    """``cu_seqlens`` as (start, end) pairs; a ValueError unless they pack a batch of one from 0 to ``length``."""
    bounds = [int(x) for x in cu_seqlens.tolist()]
    if batch_size != 1:
        raise ValueError(f"cu_seqlens packs documents into a batch of one; got a batch of {batch_size}")
    if not bounds or bounds[0] != 0 or bounds[-1] != length or any(b < a for a, b in itertools.pairwise(bounds)):
        raise ValueError(f"cu_seqlens must rise from 0 to the sequence length {length}; got {bounds}")
    return list(itertools.pairwise(bounds))


def causal_conv1d(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
    *,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Upstream's depthwise causal conv1d, each document of ``cu_seqlens`` convolved from zero padding."""
    if cu_seqlens is None:
        return _conv_whole(hidden_states, weight, bias, activation)
    pieces = [
        _conv_whole(hidden_states[..., start:end], weight, bias, activation)
        for start, end in document_bounds(cu_seqlens, hidden_states.shape[0], hidden_states.shape[-1])
    ]
    return torch.cat(pieces, dim=-1)


def _chunked(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    chunk_size: int,
    initial_state: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream's chunk recurrence on fp32 [B, H, T, *] tensors; returns (out [B, H, T, V], final state)."""
    batch, heads, length, k_dim = key.shape
    v_dim = value.shape[-1]
    pad = (chunk_size - length % chunk_size) % chunk_size
    query, key, value = (F.pad(x, (0, 0, 0, pad)) for x in (query, key, value))
    beta, g = F.pad(beta, (0, pad)), F.pad(g, (0, pad))
    query = query * k_dim**-0.5
    v_beta, k_beta = value * beta.unsqueeze(-1), key * beta.unsqueeze(-1)
    chunks = (length + pad) // chunk_size
    query, key, value, k_beta, v_beta = (
        x.reshape(batch, heads, chunks, chunk_size, x.shape[-1]) for x in (query, key, value, k_beta, v_beta)
    )
    g = g.reshape(batch, heads, chunks, chunk_size).cumsum(dim=-1)
    decay_mask = (g.unsqueeze(-1) - g.unsqueeze(-2)).tril().exp().tril()
    strictly_lower = ((k_beta @ key.transpose(-1, -2)) * decay_mask).tril(-1)
    identity = torch.eye(chunk_size, dtype=query.dtype, device=query.device)
    # (I + M)^-1: what upstream's row-by-row substitution computes, as one unit-triangular solve
    inverse = torch.linalg.solve_triangular(
        strictly_lower + identity, identity.expand_as(strictly_lower), upper=False, unitriangular=True
    )
    value = inverse @ v_beta
    k_cumdecay = inverse @ (k_beta * g.exp().unsqueeze(-1))
    state = query.new_zeros(batch, heads, k_dim, v_dim) if initial_state is None else initial_state.to(query.dtype)
    # Everything that does not read the carried state, for all chunks at once; the loop keeps the rest.
    attn = query @ key.transpose(-1, -2) * decay_mask  # decay_mask is zero above the diagonal
    query_decayed = query * g.exp().unsqueeze(-1)
    key_decayed = (key * (g[..., -1:] - g).exp().unsqueeze(-1)).transpose(-1, -2)
    chunk_decay = g[..., -1].exp()[..., None, None]
    # unbind, not indexing per chunk: the backward of t[:, :, i] writes into a zero tensor of t's whole size per
    # chunk (quadratic in the length); unbind's backward stacks the chunks' gradients once
    per_chunk = zip(
        *(x.unbind(2) for x in (value, k_cumdecay, query_decayed, attn, chunk_decay, key_decayed)), strict=True
    )
    outs = []
    for value_i, k_cumdecay_i, query_i, attn_i, decay_i, key_i in per_chunk:
        v_new = value_i - k_cumdecay_i @ state
        outs.append(query_i @ state + attn_i @ v_new)
        state = state * decay_i + key_i @ v_new
    out = torch.cat(outs, dim=2)[:, :, :length]
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
    """The chunk_gated_delta_rule contract (models/ops/slots.py), each document of ``cu_seqlens`` on its own."""
    input_dtype = query.dtype
    if use_qk_l2norm_in_kernel:
        query, key = l2_normalized(query), l2_normalized(key)
    q, k, v, b, decay = (x.transpose(1, 2).float() for x in (query, key, value, beta, g))
    if cu_seqlens is None:
        out, state = _chunked(q, k, v, decay, b, chunk_size, initial_state)
        states = [state]
    else:
        outs, states = [], []
        for index, (start, end) in enumerate(document_bounds(cu_seqlens, q.shape[0], q.shape[2])):
            initial = None if initial_state is None else initial_state[index : index + 1]
            window = slice(start, end)
            out, state = _chunked(
                q[:, :, window], k[:, :, window], v[:, :, window], decay[..., window], b[..., window], chunk_size,
                initial,
            )  # fmt: skip
            outs.append(out)
            states.append(state)
        out = torch.cat(outs, dim=2)
    final = torch.cat(states) if output_final_state else None
    return out.transpose(1, 2).contiguous().to(input_dtype), final
