"""A DSA indexer under sequence parallelism (kernel family ``sp_gather``, slot ``dsa_indexer``).

GLM-MoE-DSA's indexer picks, for every query, the ``index_topk`` keys its attention may read, by scoring
the query against the indexer keys of the whole sequence. Under Ulysses a rank holds a slice of the
sequence: its queries are its own, but the keys they must be scored against are every rank's. This kernel
all-gathers the rank's indexer keys over the sp group (in rank order, which is sequence order:
``modelgraft.models.distributed.sequence.shard_sequence``), keeps the rows of a whole-sequence mask that belong to
the rank's queries, and runs the inner kernel (the eager reference or ``shared_keys``) on them. The
indices it returns address keys of the whole (sp-padded) sequence; Ulysses attention gathers them for
every query once heads are exchanged (``modelgraft.models.distributed.ulysses``).

The indexer's result is integer indices, which carry no gradient, and it runs without autograd. The mask
must be additive (eager's): the indexer adds it to its scores, and a boolean mask (sdpa's) would add 1
for every visible key; such a mask is refused. Bound by ``modelgraft.models.distributed.parallel_ops`` when
``sp > 1``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

from modelgraft.models.distributed.collectives import all_gather
from modelgraft.models.distributed.mesh import ParallelConfigError
from modelgraft.models.ops.kernels import EAGER, eager, load_kernel

__all__ = ["INNER_INDEXERS", "dsa_indexer"]

#: Kernels of the ``dsa_indexer`` slot this one can wrap.
INNER_INDEXERS = (EAGER, "shared_keys")


@torch.no_grad()
def dsa_indexer(
    q: torch.Tensor,
    k: torch.Tensor,
    hidden_states: torch.Tensor,
    weights_proj: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor,
    *,
    softmax_scale: float,
    weights_scaling: float,
    index_topk: int,
    group: ProcessGroup | None = None,
    inner: str = EAGER,
) -> torch.Tensor:
    """``dsa_indexer`` slot contract for a rank's slice: ``q [B, s, h, d]`` local, ``k [B, s, d]`` local,
    ``attention_mask`` ``[B, S, S]`` of the whole sequence (or ``[B, s, S]``, or None: causal by
    ``position_ids``, which must be the whole sequence's); returns ``[B, s, topk]`` indices into ``S``."""
    if group is None:
        raise ParallelConfigError(
            "kernel 'sp_gather' of slot 'dsa_indexer' needs the sp process group: bind it with "
            "modelgraft.models.distributed.parallel_ops(state)"
        )
    if inner not in INNER_INDEXERS:
        raise ParallelConfigError(f"kernel 'sp_gather' wraps one of {INNER_INDEXERS} for 'dsa_indexer', not {inner!r}")
    keys = all_gather(k, 1, group)
    rows = q.shape[1]
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            raise ValueError(
                "the DSA indexer adds its attention mask to its scores: a boolean (sdpa) mask adds 1 per visible "
                "key; run attention with eager masks (ulysses_eager or ulysses_fused_attention)"
            )
        if attention_mask.shape[-2] != rows:  # the whole sequence's mask: this rank's queries only
            start = dist.get_rank(group) * rows
            attention_mask = attention_mask[..., start : start + rows, :]
    kernel = eager.dsa_indexer if inner == EAGER else load_kernel("dsa_indexer", inner)
    return kernel(
        q,
        keys,
        hidden_states,
        weights_proj,
        attention_mask,
        position_ids,
        softmax_scale=softmax_scale,
        weights_scaling=weights_scaling,
        index_topk=index_topk,
    )
