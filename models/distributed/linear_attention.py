"""Gated DeltaNet (linear-attention) layers under Ulysses sequence parallelism (kernel family ``sp_linear``).

Under sequence parallelism each rank holds a contiguous slice of every sequence
(``modelgraft.models.distributed.sequence.shard_sequence``). A Gated DeltaNet mixer (Qwen3.5) mixes tokens in two
places only, both behind op slots of the generated modeling, so the mixer's code stays upstream's:

* ``causal_conv1d``: a depthwise causal convolution of width ``K``. A token reads the ``K - 1`` inputs before
  it, which for the first tokens of a slice are the last ones of the slices before. The kernel all-gathers each
  rank's last ``K - 1`` inputs (a halo of ``[B, C, K - 1]``, not the sequence), puts the previous ranks' in
  front of its own slice, convolves with the inner kernel and drops the halo's outputs. Every rank's tokens use
  every channel, so the conv weight stays whole; its gradient is the sum over ranks, as for every weight a
  slice of tokens uses.
* ``chunk_gated_delta_rule``: the recurrence carries a ``[K, V]`` state per head along the whole sequence. The
  kernel exchanges q, k, v, the decay and beta from sequence slices to head shards (all-to-all, as Ulysses
  attention does: ``[B, S/sp, H, D]`` -> ``[B, S, H/sp, D]``), so every rank runs the inner kernel over the
  whole sequence of its heads and the state is carried exactly as in one process; the output goes back to
  the rank's slice of every head with the inverse exchange. One exchange per dtype (fp32 decay, q/k/v/beta in
  the model's dtype), each rank computing ``1/sp`` of the heads.

Both wrap an inner kernel of their slot (``inner``: ``eager``, the reference that recomputes upstream's torch
formula, or ``chunked_delta``; the GPU families when installed), and are bound by
``modelgraft.models.distributed.parallel_ops`` when ``sp > 1`` with ``base``'s kernel of each slot inside.

Packed documents: ``cu_seqlens`` (upstream's ``cu_seq_lens_q`` keyword, a batch of one) must give the whole
sequence's boundaries, the same on every rank (``shard_sequence`` passes the keyword through unchanged). The
conv maps them onto its halo and slice; the delta rule, once it holds the whole sequence, uses them as they
are (sp's padding at the end becomes a document of its own). The inner kernel decides whether documents are
kept apart (``chunked_delta`` does; upstream's torch path, hence ``eager``, ignores them, in one process too).
Boundaries one rank cannot use are refused on every rank before any exchange
(``modelgraft.models.distributed.guard.fail_together``).

Limits, refused with ``NotImplementedError``: a cache (``use_cache=True``: the conv and recurrent states a
slice would leave are not one process's), hence the decode-step slots, which only a cache reaches. The value
head count must divide by ``sp`` (``ParallelConfigError``). q and k reach the slot with the key heads (upstream's
grouped value attention: its function repeats them to the value heads); they are repeated before the exchange,
so grouped heads are exchanged repeated and any key head count works.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed import ProcessGroup

from modelgraft.models.distributed.collectives import all_gather
from modelgraft.models.distributed.guard import fail_together
from modelgraft.models.distributed.mesh import ParallelConfigError
from modelgraft.models.distributed.ulysses import heads_to_sequence, sequence_to_heads
from modelgraft.models.ops.kernels import EAGER, eager, kernel_names, load_kernel
from modelgraft.models.ops.kernels.linear_attention_reference import grouped_query_key

__all__ = ["FAMILY", "causal_conv1d", "chunk_gated_delta_rule", "inner_kernels"]

#: This family's name in ``modelgraft.models.ops.kernels.KERNEL_FAMILIES``.
FAMILY = "sp_linear"


def inner_kernels(slot: str) -> tuple[str, ...]:
    """The kernels of ``slot`` this family can wrap: every kernel of the slot but its own."""
    return tuple(name for name in kernel_names(slot) if name != FAMILY)


def _inner(slot: str, name: str, group: ProcessGroup | None) -> Callable[..., Any]:
    if group is None:
        raise ParallelConfigError(
            f"kernel {FAMILY!r} of slot {slot!r} needs the sp process group: bind it with "
            "modelgraft.models.distributed.parallel_ops(state)"
        )
    if name not in inner_kernels(slot):
        raise ParallelConfigError(f"kernel {FAMILY!r} wraps one of {inner_kernels(slot)} for {slot!r}, not {name!r}")
    return getattr(eager, slot) if name == EAGER else load_kernel(slot, name)


def _bounds(cu_seqlens: torch.Tensor, batch_size: int, length: int) -> list[int]:
    """The whole sequence's document boundaries ending at ``length`` (sp's padding: one more document)."""
    bounds = [int(x) for x in cu_seqlens.tolist()]
    if batch_size != 1:
        raise ValueError(f"cu_seqlens packs documents into a batch of one; got a batch of {batch_size}")
    if not bounds or bounds[0] != 0 or any(b < a for a, b in itertools.pairwise(bounds)):
        raise ValueError(f"cu_seqlens must rise from 0; got {bounds}")
    if bounds[-1] > length:
        raise ValueError(
            f"cu_seqlens {bounds} reach past the whole sequence of {length} positions: under sequence parallelism "
            "they must be the whole sequence's boundaries (as the batch had them before shard_sequence), the "
            "same on every rank"
        )
    return bounds if bounds[-1] == length else [*bounds, length]


def _checked_bounds(
    cu_seqlens: torch.Tensor | None, batch_size: int, length: int, group: ProcessGroup
) -> list[int] | None:
    """``_bounds`` on every rank at once: a rank that cannot use them stops every rank before the exchange."""
    if cu_seqlens is None:
        return None
    bounds: list[int] | None = None
    with fail_together(group, "sequence-parallel linear attention (cu_seqlens)"):
        bounds = _bounds(cu_seqlens, batch_size, length)
    return bounds


def causal_conv1d(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
    *,
    cu_seqlens: torch.Tensor | None = None,
    group: ProcessGroup | None = None,
    inner: str = EAGER,
) -> torch.Tensor:
    """``causal_conv1d`` slot contract on a rank's slice ``[B, C, S/sp]``: the whole sequence's conv at the
    slice's positions, the ``K - 1`` inputs before the slice read from the previous ranks (see the module)."""
    conv = _inner("causal_conv1d", inner, group)
    sp, rank = dist.get_world_size(group), dist.get_rank(group)
    batch_size, _, length = hidden_states.shape
    halo = weight.shape[-1] - 1
    bounds = _checked_bounds(cu_seqlens, batch_size, length * sp, group)
    window = hidden_states
    if halo:  # the last min(K - 1, S/sp) inputs of every rank; the K - 1 before this slice end those before it
        tails = all_gather(hidden_states[..., -min(halo, length) :], -1, group)
        before = tails[..., : rank * tails.shape[-1] // sp]
        before = F.pad(before, (max(0, halo - before.shape[-1]), 0))[..., -halo:]
        window = torch.cat((before, hidden_states), dim=-1)
    local = None
    if bounds is not None:  # the boundaries inside [slice start - (K - 1), slice end), counted from 0
        start = rank * length - halo
        inside = sorted({min(max(b - start, 0), length + halo) for b in bounds} | {0, length + halo})
        local = torch.tensor(inside, dtype=cu_seqlens.dtype, device=cu_seqlens.device)
    return conv(window, weight, bias, activation, cu_seqlens=local)[..., halo:]


def _to_heads(tensors: list[torch.Tensor], group: ProcessGroup) -> list[torch.Tensor]:
    """``[B, S/sp, H, d_i]`` each -> ``[B, S, H/sp, d_i]``, one all-to-all per dtype."""
    out: list[torch.Tensor | None] = [None] * len(tensors)
    for dtype in dict.fromkeys(t.dtype for t in tensors):
        members = [i for i, t in enumerate(tensors) if t.dtype == dtype]
        packed = torch.cat([tensors[i] for i in members], dim=-1).transpose(1, 2)  # [B, H, S/sp, sum d]
        whole = sequence_to_heads(packed, group).transpose(1, 2)  # [B, S, H/sp, sum d]
        pieces = whole.split([tensors[i].shape[-1] for i in members], dim=-1)
        for i, piece in zip(members, pieces, strict=True):
            out[i] = piece
    return out  # type: ignore[return-value]


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
    group: ProcessGroup | None = None,
    inner: str = EAGER,
) -> tuple[torch.Tensor, None]:
    """``chunk_gated_delta_rule`` slot contract on a rank's slice (``[B, S/sp, H, *]``): the inner kernel over
    the whole sequence of ``H/sp`` heads, the output returned as the rank's slice of every head."""
    rule = _inner("chunk_gated_delta_rule", inner, group)
    if initial_state is not None or output_final_state:
        raise NotImplementedError(
            "sequence-parallel linear attention runs training forwards without a cache (use_cache=False): the "
            "conv and recurrent states of a slice are not the sequence's"
        )
    sp = dist.get_world_size(group)
    heads = value.shape[2]
    if heads % sp:
        raise ParallelConfigError(
            f"sequence-parallel linear attention needs the value head count ({heads}) to divide by sp={sp}"
        )
    bounds = _checked_bounds(cu_seqlens, query.shape[0], query.shape[1] * sp, group)
    query, key = grouped_query_key(query, key, value)  # one q/k head per value head, so all five split alike
    q, k, v, decay, b = _to_heads([query, key, value, g.unsqueeze(-1), beta.unsqueeze(-1)], group)
    whole = None if bounds is None else torch.tensor(bounds, dtype=cu_seqlens.dtype, device=cu_seqlens.device)
    out, _ = rule(
        q,
        k,
        v,
        decay.squeeze(-1),
        b.squeeze(-1),
        chunk_size=chunk_size,
        initial_state=None,
        output_final_state=False,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        cu_seqlens=whole,
    )
    return heads_to_sequence(out, group), None
