"""The ``chunked_delta`` kernel family: a pure-torch CPU gated delta rule, and a causal conv1d, that honour
``cu_seqlens``.

The gated delta rule is upstream's torch fallback (``torch_chunk_gated_delta_rule``): q and k repeated to the value
heads, cast to fp32, L2-normalised and scaled there, each chunk's unit-triangular system solved with
``torch.linalg.solve_triangular``, the decayed queries and keys computed for all chunks before the loop over
chunks. Two things differ. The loop takes each chunk's tensors from ``unbind`` and concatenates the outputs,
where upstream indexes ``t[:, :, i]`` per chunk and writes into a zero tensor: the same values, but the backward
of such indexing writes a whole-length zero tensor per chunk, quadratic in the length
(benchmarks/delta_rule_bench.py measures both). And packed documents, below.

Packed documents: upstream's forward hands ``cu_seqlens`` to its kernels; its torch bodies ignore them (and its
hub decorator refuses them where FLA cannot run), so on CPU a packed batch lets one document's state leak into
the next. Here each document of a batch of one runs from its own initial state (zeros, or row i of
``initial_state``) and its conv window starts from zeros, as FLA's and causal-conv1d's GPU kernels do: a
documented departure from upstream's eager path (docs/design.md, "Where the code departs from the design
contract"). Without ``cu_seqlens`` both compute upstream's formulas.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from modelgraft.models.ops.kernels.linear_attention_reference import causal_conv1d as _conv_whole
from modelgraft.models.ops.kernels.linear_attention_reference import fp32_heads_first

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
    """Upstream's chunk recurrence on fp32 [B, H, T, *] tensors (q and k already normalised and repeated, q not
    yet scaled); returns (out [B, H, T, V], final state)."""
    batch, heads, length, k_dim = key.shape
    v_dim = value.shape[-1]
    state = query.new_zeros(batch, heads, k_dim, v_dim) if initial_state is None else initial_state.to(query)
    if length == 0:  # an empty document of cu_seqlens: no output, the state passes through
        return value.new_zeros(batch, heads, 0, v_dim), state
    query = query * k_dim**-0.5
    pad = (chunk_size - length % chunk_size) % chunk_size
    query, key, value = (F.pad(x, (0, 0, 0, pad)) for x in (query, key, value))
    beta, g = F.pad(beta, (0, pad)), F.pad(g, (0, pad))
    v_beta, k_beta = value * beta.unsqueeze(-1), key * beta.unsqueeze(-1)
    chunks = (length + pad) // chunk_size
    query, key, k_beta, v_beta = (
        x.reshape(batch, heads, chunks, chunk_size, x.shape[-1]) for x in (query, key, k_beta, v_beta)
    )
    cum_decay = g.reshape(batch, heads, chunks, chunk_size).cumsum(dim=3)
    strictly_upper = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=query.device).triu(1)
    pairwise_decay = (cum_decay.unsqueeze(4) - cum_decay.unsqueeze(3)).masked_fill(strictly_upper, float("-inf")).exp()
    system = (k_beta @ key.transpose(-1, -2)) * pairwise_decay  # only its strictly lower triangle is read
    attn = (query @ key.transpose(-1, -2)) * pairwise_decay
    value = torch.linalg.solve_triangular(system, v_beta, upper=False, unitriangular=True)
    k_cumdecay = torch.linalg.solve_triangular(
        system, k_beta * cum_decay.exp().unsqueeze(-1), upper=False, unitriangular=True
    )
    # Everything that does not read the carried state, for all chunks at once; the loop keeps the rest.
    query_decayed = query * cum_decay.exp().unsqueeze(-1)
    key_decayed = (key * (cum_decay[..., -1:] - cum_decay).exp().unsqueeze(-1)).transpose(-1, -2)
    chunk_decay = cum_decay[..., -1].exp()[..., None, None]
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
    q, k, v, b, decay = fp32_heads_first(query, key, value, beta, g, l2norm=use_qk_l2norm_in_kernel)
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
