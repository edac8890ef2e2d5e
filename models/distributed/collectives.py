"""Collectives that autograd can run backwards, each the adjoint of its forward.

``torch.distributed`` collectives are not differentiable; the functions here wrap them in
``torch.autograd.Function``s whose backward is the transposed communication:

* ``all_to_all`` (rows of dim 0, possibly uneven splits) <-> the all-to-all with the splits swapped;
* ``all_reduce_sum`` <-> ``all_reduce_sum`` of the gradients;
* ``all_gather`` along a dim <-> reduce-scatter (sum) of the gradients along that dim;
* ``scatter`` (keep this rank's chunk of a replicated tensor) <-> all-gather of the gradients.

Every rank of the group must call them in the same order, in forward and in backward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

__all__ = ["all_gather", "all_reduce_sum", "all_to_all", "scatter"]


def _all_to_all(
    x: torch.Tensor, output_splits: Sequence[int] | None, input_splits: Sequence[int] | None, group: ProcessGroup
) -> torch.Tensor:
    x = x.contiguous()
    if output_splits is None:
        out = torch.empty_like(x)
    else:
        out = x.new_empty((sum(output_splits), *x.shape[1:]))
    dist.all_to_all_single(
        out,
        x,
        output_split_sizes=None if output_splits is None else list(output_splits),
        input_split_sizes=None if input_splits is None else list(input_splits),
        group=group,
    )
    return out


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, output_splits: Any, input_splits: Any, group: ProcessGroup) -> torch.Tensor:
        ctx.splits, ctx.group = (output_splits, input_splits), group
        return _all_to_all(x, output_splits, input_splits, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        output_splits, input_splits = ctx.splits
        return _all_to_all(grad, input_splits, output_splits, ctx.group), None, None, None


def all_to_all(
    x: torch.Tensor,
    group: ProcessGroup,
    output_splits: Sequence[int] | None = None,
    input_splits: Sequence[int] | None = None,
) -> torch.Tensor:
    """``all_to_all_single`` over the rows (dim 0) of ``x``; ``None`` splits mean equal chunks."""
    return _AllToAll.apply(x, output_splits, input_splits, group)


class _AllReduceSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
        ctx.group = group
        out = x.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


def all_reduce_sum(x: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
    """The sum of ``x`` over the group, on every rank; its gradient is the sum of the ranks' gradients.

    So when every rank back-propagates the same reduced value (a global loss), each rank's inputs get
    ``group size`` times their share of the gradient, which averaging over the group (what FSDP and
    DDP do) turns back into exactly the gradient of the reduced value.
    """
    return _AllReduceSum.apply(x, group)


def _gather(x: torch.Tensor, dim: int, group: ProcessGroup) -> torch.Tensor:
    chunks = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(chunks, x.contiguous(), group=group)
    return torch.cat(chunks, dim=dim)


def _reduce_scatter(x: torch.Tensor, dim: int, group: ProcessGroup) -> torch.Tensor:
    size = dist.get_world_size(group)
    if dist.get_backend(group) == "gloo":  # gloo has no reduce_scatter: sum everything, keep this rank's chunk
        total = x.contiguous().clone()
        dist.all_reduce(total, group=group)
        return total.chunk(size, dim=dim)[dist.get_rank(group)].contiguous()
    chunks = [chunk.contiguous() for chunk in x.chunk(size, dim=dim)]
    out = torch.empty_like(chunks[0])
    dist.reduce_scatter(out, chunks, group=group)
    return out


class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, group: ProcessGroup) -> torch.Tensor:
        ctx.dim, ctx.group = dim, group
        return _gather(x, dim, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _reduce_scatter(grad, ctx.dim, ctx.group), None, None


def all_gather(x: torch.Tensor, dim: int, group: ProcessGroup) -> torch.Tensor:
    """Every rank's ``x`` (same shape everywhere) concatenated along ``dim``, in rank order."""
    return _AllGather.apply(x, dim, group)


class _Scatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, group: ProcessGroup) -> torch.Tensor:
        ctx.dim, ctx.group = dim, group
        size = dist.get_world_size(group)
        if x.shape[dim] % size:
            raise ValueError(f"dim {dim} of size {x.shape[dim]} does not split into {size} equal chunks")
        return x.chunk(size, dim=dim)[dist.get_rank(group)].contiguous()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _gather(grad, ctx.dim, ctx.group), None, None


def scatter(x: torch.Tensor, dim: int, group: ProcessGroup) -> torch.Tensor:
    """This rank's chunk of ``x`` along ``dim`` (``x`` is the same on every rank; its size must divide)."""
    return _Scatter.apply(x, dim, group)
