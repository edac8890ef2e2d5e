"""Gradients of a sharded model: averaging without FSDP, clipping by the global norm, accumulation.

Under expert parallelism a model's parameters live on several meshes: FSDP shards dense parameters
over the data mesh and experts over the ``ep_replicate`` mesh, and the ``ep`` ranks of a row hold
different experts as plain local tensors. ``torch.nn.utils.clip_grad_norm_`` stacks per-parameter
norms, which fails for DTensors on different meshes ("All operands in aten.stack.default must have
the same mesh"); computing one norm per mesh instead would give each ep rank the norm of its own
experts only, so the ranks would clip by different factors and silently drift apart.
:func:`clip_grad_norm` computes the one-process norm of every gradient with torch's own pieces
(``get_total_norm`` per mesh, ``full_tensor`` over that mesh, a sum over the ep ranks for expert
gradients) and clips with ``clip_grads_with_norm_``.

:func:`accumulate` wraps FSDP's ``set_requires_gradient_sync`` so micro-batches accumulate unsharded
gradients locally and reduce once, on the last micro-batch's backward. Pair it with
:func:`modelgraft.models.distributed.losses.global_token_count` as the loss's ``num_items_in_batch``:
each micro-batch's loss is then its share of the accumulated batch's mean, and the summed gradients
are those of one big batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor, Partial

from modelgraft.models.distributed.expert_parallel import expert_shards
from modelgraft.models.distributed.mesh import ParallelState

__all__ = ["accumulate", "average_gradients", "clip_grad_norm", "grad_norm"]

T = TypeVar("T")


def average_gradients(model: nn.Module, state: ParallelState) -> None:
    """Average gradients as FSDP would, for a model that is not FSDP-sharded (a DDP stand-in).

    Dense parameters are averaged over the data ranks. Expert-parallel chunks are summed over the ranks
    holding the same chunk (``ep_replicate``) and divided by the world size too: each chunk's gradient
    already sums the tokens of its ``ep`` ranks. A parameter without a gradient counts as a zero gradient.
    """
    experts = expert_shards(model)
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        group, size = (
            (state.ep_replicate_group, state.ep_replicate) if name in experts else (state.data_group, state.world_size)
        )
        if size > 1:
            dist.all_reduce(param.grad, group=group)
        if state.world_size > 1:
            param.grad.div_(state.world_size)


def _grads_by_mesh(model: nn.Module) -> dict[tuple[DeviceMesh | None, bool], list[nn.Parameter]]:
    """Parameters with a gradient, grouped by (DTensor mesh or None for a plain tensor, expert-parallel)."""
    experts = expert_shards(model)
    groups: dict[tuple[DeviceMesh | None, bool], list[nn.Parameter]] = {}
    for name, param in model.named_parameters():
        if param.grad is None:
            continue
        mesh = param.grad.device_mesh if isinstance(param.grad, DTensor) else None
        groups.setdefault((mesh, name in experts), []).append(param)
    return groups


def _largest_element(grads: list[torch.Tensor], mesh: DeviceMesh, error_if_nonfinite: bool) -> torch.Tensor:
    """The inf-norm of DTensor gradients on ``mesh``: the largest local element, maximized over the mesh.

    ``get_total_norm`` refuses the inf-norm of an empty tensor (a max has no identity), and FSDP leaves a
    rank an empty shard of a parameter whose dim 0 runs out before that rank (a 6-expert router's
    ``[6, H]`` weight on 4 ranks: 2, 2, 2 and 0 rows), so the empty local shards are left out here; a norm is never below 0, the max's identity.
    """
    local = [grad.to_local() for grad in grads]
    largest = torch.nn.utils.get_total_norm([t for t in local if t.numel()], math.inf, error_if_nonfinite)
    largest = largest.to(device=local[0].device, dtype=torch.float32)
    return DTensor.from_local(largest, mesh, [Partial("max")] * mesh.ndim).full_tensor()


@torch.no_grad()
def grad_norm(
    model: nn.Module, state: ParallelState, norm_type: float = 2.0, *, error_if_nonfinite: bool = False
) -> torch.Tensor:
    """The ``norm_type``-norm of all of ``model``'s gradients as one process computes it, the same on every rank.

    Collective over the world: every rank must call it. Each mesh's gradients are reduced by torch
    (``get_total_norm``, then ``full_tensor`` over the mesh); the expert-parallel ones are then summed
    (max for ``inf``) over the ep ranks, which hold different experts. A model that is not sharded gives
    its local norm.
    """
    norm_type = float(norm_type)
    norms = []
    for (mesh, is_expert), params in sorted(_grads_by_mesh(model).items(), key=lambda item: item[0][1]):
        grads = [p.grad for p in params]
        if mesh is not None and math.isinf(norm_type):
            norm = _largest_element(grads, mesh, error_if_nonfinite)
        else:
            norm = torch.nn.utils.get_total_norm(grads, norm_type, error_if_nonfinite)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        if is_expert and state.ep > 1:
            if math.isinf(norm_type):
                dist.all_reduce(norm, op=dist.ReduceOp.MAX, group=state.ep_group)
            else:
                power = norm.pow(norm_type)
                dist.all_reduce(power, group=state.ep_group)
                norm = power.pow(1.0 / norm_type)
        norms.append(norm)
    if not norms:
        return torch.zeros(())
    return torch.nn.utils.get_total_norm(norms, norm_type, error_if_nonfinite)


@torch.no_grad()
def clip_grad_norm(
    model: nn.Module,
    state: ParallelState,
    max_norm: float,
    norm_type: float = 2.0,
    *,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` for a model sharded with FSDP and/or expert parallelism.

    Scales every gradient by ``max_norm / total`` when the total norm (:func:`grad_norm`, the one-process
    norm, identical on every rank) exceeds ``max_norm``; returns that total norm. Collective.
    """
    total = grad_norm(model, state, norm_type, error_if_nonfinite=error_if_nonfinite)
    for params in _grads_by_mesh(model).values():  # one call per mesh: DTensor ops do not mix meshes
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total, foreach)
    return total


def accumulate(model: nn.Module, micro_batches: Sequence[T]) -> Iterator[T]:
    """Yield ``micro_batches`` for forward and backward; FSDP reduces gradients only in the last one's backward.

    Every micro-batch but the last runs with ``set_requires_gradient_sync(False)``: FSDP keeps the
    unsharded gradients and adds the next backward to them, and the last backward reduce-scatters the
    sum once (one reduction per step instead of one per micro-batch). Call ``backward`` inside the loop
    body. Gradient sync is switched back on when the loop ends, however it ends. A model without FSDP is
    left alone (average its gradients after the loop, as for one batch).
    """
    fsdp = isinstance(model, FSDPModule)
    try:
        for index, batch in enumerate(micro_batches):
            if fsdp:
                model.set_requires_gradient_sync(index == len(micro_batches) - 1)
            yield batch
    finally:
        if fsdp:
            model.set_requires_gradient_sync(True)
