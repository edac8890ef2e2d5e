"""Load a safetensors checkpoint into an expert-parallel model, each rank reading only its own experts.

:func:`load_expert_parallel_checkpoint` is :func:`modelgraft.models.checkpoint.load_checkpoint` for a model that
:func:`~models.distributed.expert_parallel.apply_expert_parallel` has already sharded: every planned
parameter is this rank's chunk, and the :class:`~models.distributed.expert_parallel.ExpertShard` recorded
for it says which one (the plan's ``shard(d)`` dim, the ep rank and size, the global shape). For each key
of the checkpoint it decides, before reading anything, how much to read:

* a per-expert hub key (``...experts.17.gate_proj.weight``) of another rank's expert: skipped, never
  read, never handed to the converter (which therefore never stacks it);
* a per-expert key of this rank's expert: read and fused by the converter restricted to this rank's
  experts (``converter.for_experts(start, stop)``), which stacks only those: ``[E/ep, 2I, H]``;
* an already-fused tensor named like a sharded parameter: only this rank's slice is read, with
  safetensors' ``get_slice`` (the other experts' bytes stay on disk); fused tensors stored transposed
  (``[E, H, 2I]``) are sliced along the same experts dim, and the converter, not the shape, says which
  layout the checkpoint uses;
* everything else (embeddings, attention, the router, dense MLPs): read whole and loaded as usual.

Every rank reads the files on its own; there is no collective. With ``strict`` (the default) a local
expert the checkpoint lacks raises, naming the parameter, the experts and the rank. A converter that
does not know about experts (no ``for_experts`` / ``expert_of``) still works, but reads every expert and
keeps its slice after conversion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from modelgraft.models.checkpoint import CheckpointError, LoadResult, load_checkpoint
from modelgraft.models.converters import ChainedConverter, CheckpointConverter, ConversionError, converter_for
from modelgraft.models.converters.moe import _ranges
from modelgraft.models.distributed.expert_parallel import ExpertShard, expert_shards
from modelgraft.models.distributed.mesh import ParallelConfigError

__all__ = ["load_expert_parallel_checkpoint", "local_expert_range"]


def local_expert_range(shards: Mapping[str, ExpertShard]) -> tuple[int, int] | None:
    """``(start, stop)``: the experts this rank holds, from the shards on dim 0; None without such shards.

    Every expert tensor sharded on dim 0 must give the same range (the same number of experts per layer).
    """
    ranges = {}
    for name, shard in shards.items():
        if shard.dim == 0:
            ranges[name] = (shard.offset, shard.offset + shard.global_shape[0] // shard.ep)
    found = set(ranges.values())
    if len(found) > 1:
        listed = ", ".join(f"{name}: {start}-{stop - 1}" for name, (start, stop) in sorted(ranges.items()))
        raise ParallelConfigError(f"the expert tensors disagree on this rank's experts ({listed})")
    return found.pop() if found else None


# -- converters restricted to this rank's experts ----------------------------------------------------------
class _SliceOutputs:
    """A converter that knows nothing of experts: it converts every expert, then its outputs are sliced."""

    def __init__(self, inner: CheckpointConverter, shards: Mapping[str, ExpertShard]) -> None:
        self.inner = inner
        self.shards = shards

    def can_handle(self, key: str) -> bool:
        return self.inner.can_handle(key)

    def _sliced(self, pairs: Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
        out = []
        for key, tensor in pairs:
            shard = self.shards.get(key)
            if shard is not None and tuple(tensor.shape) == shard.global_shape:
                size = shard.global_shape[shard.dim] // shard.ep
                tensor = tensor.narrow(shard.dim, shard.offset, size)
            out.append((key, tensor))
        return out

    def convert(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        return self._sliced(self.inner.convert(key, tensor))

    def finalize(self) -> list[tuple[str, torch.Tensor]]:
        return self._sliced(self.inner.finalize())


def _restrict(
    converter: CheckpointConverter, experts: tuple[int, int] | None, shards: Mapping[str, ExpertShard]
) -> CheckpointConverter:
    """``converter`` for this rank: expert-aware converters keep ``experts`` only, others slice their outputs."""
    if isinstance(converter, ChainedConverter):
        return ChainedConverter(*(_restrict(member, experts, shards) for member in converter.converters))
    if experts is not None and hasattr(converter, "for_experts") and hasattr(converter, "expert_of"):
        return converter.for_experts(*experts)
    return _SliceOutputs(converter, shards)


def _owner(converter: CheckpointConverter | None, key: str) -> CheckpointConverter | None:
    """The innermost converter a key goes to (through chains), or None when no converter handles it."""
    while converter is not None and converter.can_handle(key):
        if not isinstance(converter, ChainedConverter):
            return converter
        converter = next(member for member in converter.converters if member.can_handle(key))
    return None


# -- reading ----------------------------------------------------------------------------------------------
def _read_slice(handle: Any, key: str, shard: ExpertShard) -> torch.Tensor:
    """This rank's chunk of the fused tensor ``key``, read with ``get_slice`` (nothing else leaves the disk).

    The chunk is cut on the sharded dim only. Which way round the checkpoint stores the matrices is not
    decided here from the shape: on the experts dim (dim 0, every zoo plan) the cut is the same in both
    layouts, and the converter then tells the layout from the config's sizes
    (``modelgraft.models.converters.layout``). A tensor sharded on one of its matrix dims is read in the
    model's layout only.
    """
    view = handle.get_slice(key)
    stored = tuple(view.get_shape())
    glob = shard.global_shape
    dim = shard.dim
    matrix_dims = dim >= len(glob) - 2
    if len(stored) != len(glob) or stored[dim] != glob[dim] or (matrix_dims and stored != glob):
        raise CheckpointError(
            f"{key!r}: checkpoint shape {list(stored)}, the model's whole (all ranks') shape {list(glob)}"
        )
    size = glob[dim] // shard.ep
    index = (slice(None),) * dim + (slice(shard.offset, shard.offset + size),)
    return view[index]


def load_expert_parallel_checkpoint(
    model: nn.Module,
    path: str | Path,
    *,
    converter: CheckpointConverter | Literal["auto"] | None = "auto",
    strict: bool = True,
) -> LoadResult:
    """Load the checkpoint at ``path`` into ``model``, sharded by :func:`apply_expert_parallel`, reading only
    this rank's experts.

    Call it after ``apply_expert_parallel(model, state)`` and before ``apply_fsdp``, on every rank (no
    collective is involved). ``converter`` and ``strict`` are as in :func:`modelgraft.models.checkpoint.load_checkpoint`;
    a model that was not sharded loads exactly as there. Returns the :class:`~models.checkpoint.LoadResult`
    of this rank; keys of other ranks' experts are in none of its fields.
    """
    shards = expert_shards(model)
    if converter == "auto":
        config = getattr(model, "config", None)
        converter = converter_for(config) if config is not None else None
    if not shards:
        return load_checkpoint(model, path, converter=converter, strict=strict)

    experts = local_expert_range(shards)
    local = _restrict(converter, experts, shards) if converter is not None else None
    any_shard = next(iter(shards.values()))
    where = f"ep rank {any_shard.ep_rank} of {any_shard.ep}"
    if experts is not None:
        where += f", experts {_ranges(list(range(*experts)))}"

    def read(handle: Any, key: str) -> torch.Tensor | None:
        owner = _owner(local, key)
        if owner is not None and not hasattr(owner, "expert_of"):
            return handle.get_tensor(key)  # a converter that expects whole tensors: it gets them
        if owner is not None and experts is not None:
            expert = owner.expert_of(key)
            if expert is not None and not experts[0] <= expert < experts[1]:
                return None  # another rank's expert: not read, not converted
        shard = shards.get(key)
        if shard is not None:
            return _read_slice(handle, key, shard)
        return handle.get_tensor(key)

    def check(result: LoadResult) -> None:
        """``strict``, said per rank: run before anything is copied, so a refused load changes nothing."""
        if not strict or not (result.missing or result.unexpected):
            return
        problems = []
        missing_experts = [key for key in result.missing if key in shards]
        others = [key for key in result.missing if key not in shards]
        if missing_experts:
            problems.append(f"this rank's experts are missing from the checkpoint: {_listed(missing_experts)}")
        if others:
            problems.append(f"missing from the checkpoint: {_listed(others)}")
        if result.unexpected:
            problems.append(f"not in the model: {_listed(result.unexpected)}")
        raise CheckpointError(
            f"checkpoint {path} does not fit {type(model).__name__} ({where}): " + "; ".join(problems)
        )

    try:
        return load_checkpoint(model, path, converter=local, strict=False, read=read, check=check)
    except ConversionError as error:
        raise ConversionError(f"{where}: {error}") from error


def _listed(keys: Iterable[str], limit: int = 10) -> str:
    keys = sorted(keys)
    more = f" (and {len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more
