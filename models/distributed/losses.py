"""Kernel ``global_batch``: the causal-LM and load-balancing losses of the global batch, on every rank.

When the batch is split over ranks (data parallel, sequence parallel, or both) a per-rank mean is not
the mean over the batch: ranks hold different numbers of non-ignored tokens, and the load-balancing
loss multiplies two averages over all tokens. These kernels reduce the sufficient statistics over the
data group instead, so ``model(...).loss`` on every rank is the loss one process computes on the
concatenation of all ranks' tokens:

* ``causal_lm_loss``: this rank's summed cross entropy divided by the global number of target tokens
  (``num_items_in_batch`` when the caller gives it), summed over the group. Under sequence parallelism
  the labels are shifted across rank boundaries: the last position of a rank's slice predicts the
  first label of the next rank's slice (exchanged over ``sp_group``), unless ``shift_labels`` is given.
* ``load_balancing_loss``: the per-expert routed-token counts, router-probability sums and token
  counts are summed over the group before the Switch-Transformer formula, as upstream's
  ``load_balancing_loss_func`` computes them over one process's batch. Padding is read from any mask
  form (2-D, 4-D, a dict of 4-D masks) at this rank's own tokens: under sequence parallelism a 4-D mask
  covers the whole sequence, so its diagonal is read at the rank's slice (``sp_group`` gives which one;
  ``modelgraft.models.ops.kernels.token_mask.slice_real_token_mask``).

Gradient accumulation: each micro-batch's loss must be its share of the accumulated batch's mean, not
its own mean (a mean of means weighs the tokens of short micro-batches more). :func:`global_token_count`
counts the target tokens of all micro-batches on all data ranks; pass it as ``num_items_in_batch``
and ``causal_lm_loss`` divides by it instead of by the micro-batch's own count.

The reductions are differentiable (``collectives.all_reduce_sum``): each rank's gradients are the
group size times its share, so averaging gradients over the data ranks (FSDP, DDP,
``modelgraft.models.distributed.average_gradients``) gives the one-process gradient.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed import ProcessGroup

from modelgraft.models.distributed.collectives import all_reduce_sum
from modelgraft.models.ops.kernels import chunked_loss, eager
from modelgraft.models.ops.kernels.loss_inputs import shift_causal_labels
from modelgraft.models.ops.kernels.token_mask import slice_real_token_mask

if TYPE_CHECKING:
    from modelgraft.models.distributed.mesh import ParallelState

__all__ = ["causal_lm_loss", "global_token_count", "load_balancing_loss", "shift_labels_across_ranks"]

_INNER = {"eager": eager.causal_lm_loss, "chunked": chunked_loss.causal_lm_loss}


def _require(group: ProcessGroup | None, slot: str) -> ProcessGroup:
    if group is None:
        raise ValueError(
            f"kernel 'global_batch' of slot {slot!r} needs the data process group: "
            "bind it with models.distributed.parallel_ops(state)"
        )
    return group


def shift_labels_across_ranks(
    labels: torch.Tensor, sp_group: ProcessGroup | None, ignore_index: int = -100
) -> torch.Tensor:
    """Next-token targets of a sequence slice: ``labels`` shifted left, the last one taken from the next
    sp rank's first label (``ignore_index`` on the last rank). Without a group, the plain shift."""
    if sp_group is None or dist.get_world_size(sp_group) == 1:
        return shift_causal_labels(labels, ignore_index)
    first = labels[..., :1].contiguous()
    firsts = [torch.empty_like(first) for _ in range(dist.get_world_size(sp_group))]
    dist.all_gather(firsts, first, group=sp_group)
    rank = dist.get_rank(sp_group)
    following = firsts[rank + 1] if rank + 1 < len(firsts) else torch.full_like(first, ignore_index)
    return torch.cat((labels[..., 1:], following), dim=-1)


def global_token_count(
    micro_batches: Iterable[Mapping[str, torch.Tensor]], state: ParallelState, ignore_index: int = -100
) -> torch.Tensor:
    """The target tokens of every micro-batch on every data rank: ``num_items_in_batch`` for accumulation.

    A micro-batch's targets are its ``shift_labels`` (what :func:`~models.distributed.sequence.shard_sequence`
    adds) or else its ``labels`` shifted as the loss shifts them (across the sp ranks). Collective over
    the data group; the count is the same fp32 scalar on every rank.
    """
    sp_group = state.sp_group if state.sp > 1 else None
    count: torch.Tensor | None = None
    for batch in micro_batches:
        targets = batch.get("shift_labels")
        if targets is None:
            targets = shift_labels_across_ranks(batch["labels"], sp_group, ignore_index)
        tokens = (targets != ignore_index).sum().to(torch.float32)
        count = tokens if count is None else count + tokens
    if count is None:
        raise ValueError("global_token_count needs at least one micro-batch")
    if state.world_size > 1:
        dist.all_reduce(count, group=state.data_group)
    return count


def causal_lm_loss(
    hidden_states: torch.Tensor,
    lm_head_weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    vocab_size: int,
    num_items_in_batch: Any = None,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    final_logit_softcapping: float | None = None,
    lm_head_bias: torch.Tensor | None = None,
    softcap_in_fp32: bool = False,
    group: ProcessGroup | None = None,
    sp_group: ProcessGroup | None = None,
    inner: str = "eager",
    chunk_size: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``causal_lm_loss`` slot contract, reduced over ``group``; ``inner`` ("eager" or "chunked") computes
    this rank's share. Returns the global loss and this rank's logits (None with "chunked")."""
    group = _require(group, "causal_lm_loss")
    if inner not in _INNER:
        raise ValueError(f"inner loss kernel must be one of {sorted(_INNER)}, got {inner!r}")
    if shift_labels is None:
        shift_labels = shift_labels_across_ranks(labels, sp_group, ignore_index)
    if num_items_in_batch is None:
        num_items_in_batch = (shift_labels != ignore_index).sum().to(torch.float32)
        dist.all_reduce(num_items_in_batch, group=group)
    options = {} if chunk_size is None or inner != "chunked" else {"chunk_size": chunk_size}
    share, logits = _INNER[inner](
        hidden_states,
        lm_head_weight,
        labels,
        vocab_size=vocab_size,
        num_items_in_batch=num_items_in_batch,
        ignore_index=ignore_index,
        shift_labels=shift_labels,
        final_logit_softcapping=final_logit_softcapping,
        lm_head_bias=lm_head_bias,
        softcap_in_fp32=softcap_in_fp32,
        **options,
    )
    return all_reduce_sum(share, group), logits


def load_balancing_loss(
    router_logits: Any,
    num_experts: int,
    top_k: int,
    attention_mask: Any,
    *,
    group: ProcessGroup | None = None,
    sp_group: ProcessGroup | None = None,
) -> torch.Tensor | int:
    """``load_balancing_loss`` slot contract over the tokens of every rank of ``group``.

    ``attention_mask`` may be any form the model accepted: a 2-D ``[batch, seq]`` mask of this rank's
    tokens, a 4-D mask or a dict of them; under sequence parallelism (``sp_group`` of more than one
    rank) a 4-D mask may cover the whole sequence, and only this rank's slice of its diagonal counts.
    A form that names no real tokens for this rank's router-logit rows raises ``ValueError``.
    """
    group = _require(group, "load_balancing_loss")
    if not isinstance(router_logits, tuple) or not router_logits:
        return 0
    device = router_logits[0].device
    tokens_per_expert = torch.zeros(num_experts, dtype=torch.float32, device=device)
    router_prob = torch.zeros(num_experts, dtype=torch.float32, device=device)
    total_rows = torch.zeros((), dtype=torch.float32, device=device)
    sp, sp_rank = (1, 0) if sp_group is None else (dist.get_world_size(sp_group), dist.get_rank(sp_group))
    attention_mask = slice_real_token_mask(
        attention_mask, num_tokens=router_logits[0].shape[0], sp_rank=sp_rank, sp=sp
    )
    if attention_mask is not None:
        flat_mask = attention_mask.reshape(-1).to(device=device, dtype=torch.float32)
    for layer_logits in router_logits:
        routing_weights = F.softmax(layer_logits.to(device), dim=-1)
        _, selected = torch.topk(routing_weights, top_k, dim=-1)
        if attention_mask is None:
            tokens_per_expert = tokens_per_expert + torch.bincount(selected.reshape(-1), minlength=num_experts).float()
            router_prob = router_prob + routing_weights.float().sum(dim=0)
            total_rows = total_rows + routing_weights.shape[0]
        else:
            tokens_per_expert = tokens_per_expert + torch.zeros(
                num_experts, dtype=torch.float32, device=device
            ).scatter_add_(0, selected.reshape(-1), flat_mask.repeat_interleave(top_k))
            router_prob = router_prob + (routing_weights.float() * flat_mask.unsqueeze(-1)).sum(dim=0)
            total_rows = total_rows + flat_mask.sum()
    counts = torch.cat((tokens_per_expert, total_rows.reshape(1))).detach()
    dist.all_reduce(counts, group=group)
    tokens_per_expert, total_rows = counts[:-1], counts[-1]
    router_prob = all_reduce_sum(router_prob, group)
    overall = torch.sum((tokens_per_expert / total_rows) * (router_prob / total_rows).unsqueeze(0))
    return overall * num_experts
