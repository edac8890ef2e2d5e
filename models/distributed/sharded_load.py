"""Load a hub checkpoint straight into a sharded model: each rank reads only the slices it holds.

:func:`load_sharded_checkpoint` fills a model that :func:`~models.distributed.expert_parallel.apply_expert_parallel`
and/or :func:`~models.distributed.fsdp.apply_fsdp` have sharded (typically built on the meta device and
materialized with :func:`~models.distributed.materialize.materialize`) from ``from_pretrained``-layout
safetensors: one file, a folder, or a sharded folder with ``model.safetensors.index.json``.

Where each rank's slice lies is read from torch's own placements, not recomputed: a DTensor's local shape
and global offset (``compute_local_shape_and_global_offset``, as ``torch.distributed.checkpoint`` uses it)
give FSDP's rows; an :class:`~models.distributed.expert_parallel.ExpertShard` gives the ep rank's experts;
both compose (FSDP's rows of this ep rank's experts). For each checkpoint key the loader decides, from the
safetensors header alone, what to read:

* a key loaded as it is (no converter handles it): this rank's slice, with ``get_slice``. A key the model
  lacks, or whose stored shape is not the model's whole shape, is refused before any tensor is read;
* a key of an expert-aware converter (``for_experts`` / ``expert_of``: the fused-experts converters of
  ``modelgraft.models.converters``): the converter is restricted to the experts this rank holds (after
  EP *and* FSDP), per-expert keys of other experts are skipped unread, and an already-fused expert tensor
  is read only on its experts dim (dim 0 in either stored layout; the converter decides the layout from
  the config's sizes);
* a key a converter only renames (it answers ``rename(key)`` with the model's name for it): this rank's
  slice of the renamed entry, as above, without calling ``convert``;
* a key of another converter (one that rewrites values): read whole and converted, then each output is
  cut to this rank's slice. Such a converter reads more than this rank's slice; the limits in
  docs/distributed.md say so.

Everything runs inside :func:`~models.distributed.guard.fail_together`: no collective happens before the
keys are checked, and an error on one rank (a missing expert of its own, a shape mismatch) raises on every
rank (the others raise ``PeerFailedError``, naming it) instead of leaving them waiting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from torch.distributed import ProcessGroup
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from modelgraft.models import checkpoint as checkpoint_module
from modelgraft.models.checkpoint import CheckpointError, LoadResult, checkpoint_files, describe_key_problems
from modelgraft.models.converters import ChainedConverter, CheckpointConverter, converter_for
from modelgraft.models.distributed.expert_parallel import ExpertShard, expert_shards
from modelgraft.models.distributed.guard import fail_together

__all__ = ["Placement", "load_sharded_checkpoint", "placements_of"]


@dataclass(frozen=True)
class Placement:
    """Where this rank's part of one state-dict entry lies in the whole (checkpoint) tensor."""

    #: The whole tensor's shape: what the checkpoint stores (in the model's layout).
    global_shape: tuple[int, ...]
    #: This rank's slice of it, one ``slice`` per dim.
    index: tuple[slice, ...]
    #: The local storage to fill (a DTensor's local tensor, an expert chunk, or the whole tensor).
    local: torch.Tensor

    @property
    def local_shape(self) -> tuple[int, ...]:
        return tuple(s.stop - s.start for s in self.index)

    @property
    def whole(self) -> bool:
        return self.local_shape == self.global_shape


def _placement(tensor: torch.Tensor, shard: ExpertShard | None) -> Placement:
    if isinstance(tensor, DTensor):
        with torch.no_grad():  # the local tensor itself (FSDP's storage), not an autograd view of it
            local = tensor.to_local()
        shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
        if any(not isinstance(p, Shard) and not p.is_replicate() for p in tensor.placements):
            raise CheckpointError(f"unsupported DTensor placements {tensor.placements} for sharded loading")
        bounds = [(o, o + n) for o, n in zip(offset, shape, strict=True)]
    else:
        local = tensor
        bounds = [(0, n) for n in tensor.shape]
    global_shape = tuple(tensor.shape)
    if shard is not None:  # the (FSDP-sharded) tensor is this ep rank's chunk of the whole expert tensor
        global_shape = shard.global_shape
        start, stop = bounds[shard.dim]
        bounds[shard.dim] = (shard.offset + start, shard.offset + stop)
    return Placement(global_shape, tuple(slice(a, b) for a, b in bounds), local)


def placements_of(model: nn.Module) -> dict[str, Placement]:
    """Every state-dict entry of ``model`` (sharded or not): name -> :class:`Placement` on this rank."""
    shards = expert_shards(model)
    return {name: _placement(tensor, shards.get(name)) for name, tensor in model.state_dict(keep_vars=True).items()}


# -- converters ------------------------------------------------------------------------------------------------
def _expert_aware(converter: CheckpointConverter) -> bool:
    return hasattr(converter, "for_experts") and hasattr(converter, "expert_of")


def _members(converter: CheckpointConverter | None) -> list[CheckpointConverter]:
    if converter is None:
        return []
    if isinstance(converter, ChainedConverter):
        return [m for member in converter.converters for m in _members(member)]
    return [converter]


def _owner(converter: CheckpointConverter | None, key: str) -> CheckpointConverter | None:
    """The innermost converter ``key`` goes to (through chains), or None."""
    while converter is not None and converter.can_handle(key):
        if not isinstance(converter, ChainedConverter):
            return converter
        converter = next(member for member in converter.converters if member.can_handle(key))
    return None


def _expert_rows(converter: CheckpointConverter, placements: Mapping[str, Placement]) -> tuple[int, int] | None:
    """The experts this rank holds of the fused tensors ``converter`` emits (their dim-0 rows: the ep rank's
    experts, cut further when FSDP shards dim 0); None when the tensors disagree (then nothing is restricted:
    correct, only more is read). When FSDP cuts another dim (the experts' rows), whole experts are read and
    the converter's output is cut on that dim."""
    rows = set()
    for name, placement in placements.items():
        if converter.can_handle(name) and converter.expert_of(name) is None:
            rows.add((placement.index[0].start, placement.index[0].stop))
    return rows.pop() if len(rows) == 1 else None


def _cut(tensor: torch.Tensor, placement: Placement) -> torch.Tensor | None:
    """``tensor`` cut to this rank's part: each dim of the whole size is cut to the placement, each dim of
    the local size is taken as already cut (a restricted converter emits only this rank's experts);
    None when a dim has neither size."""
    index = []
    for size, whole, part, cut in zip(
        tensor.shape, placement.global_shape, placement.local_shape, placement.index, strict=True
    ):
        if size == whole:
            index.append(cut)
        elif size == part:
            index.append(slice(None))
        else:
            return None
    return tensor[tuple(index)]


def _restricted(
    converter: CheckpointConverter | None, ranges: dict[int, tuple[int, int] | None]
) -> CheckpointConverter | None:
    """``converter`` with every expert-aware member emitting only the experts this rank holds."""
    if converter is None:
        return None
    if isinstance(converter, ChainedConverter):
        return ChainedConverter(*(_restricted(member, ranges) for member in converter.converters))
    rows = ranges.get(id(converter))
    if rows is not None and rows[0] < rows[1]:
        return converter.for_experts(*rows)
    return converter


# -- the load ------------------------------------------------------------------------------------------------
def _shape_problems(
    headers: Mapping[str, tuple[int, ...]], converter: CheckpointConverter | None, placements: Mapping[str, Placement]
) -> tuple[list[str], list[str]]:
    """From the headers alone: keys loaded as they are that the model lacks, and those of the wrong shape."""
    unexpected, misshaped = [], []
    for key, shape in headers.items():
        target = _loaded_as(converter, key)
        if target is None:
            continue
        placement = placements.get(target)
        renamed = "" if target == key else f" (loaded as {target})"
        if placement is None:
            unexpected.append(key)
        elif shape != placement.global_shape:
            misshaped.append(
                f"{key}{renamed}: checkpoint shape {list(shape)}, the model's whole shape {list(placement.global_shape)}"
            )
    return unexpected, misshaped


def _loaded_as(converter: CheckpointConverter | None, key: str) -> str | None:
    """The entry ``key`` fills unchanged: itself without a converter, the converter's ``rename(key)`` for one
    that only renames it; None when the converter must see the whole tensor."""
    owner = _owner(converter, key)
    if owner is None:
        return key
    rename = getattr(owner, "rename", None)
    return None if rename is None else rename(key)


def load_sharded_checkpoint(
    model: nn.Module,
    path: str | Path,
    *,
    converter: CheckpointConverter | Literal["auto"] | None = "auto",
    strict: bool = True,
    group: ProcessGroup | None = None,
) -> LoadResult:
    """Fill ``model``'s local shards from the checkpoint at ``path``, reading only this rank's slices.

    Call it on every rank of ``group`` (default: the whole world) after sharding (``apply_expert_parallel``,
    ``apply_fsdp``) and materializing. ``converter="auto"`` uses the one registered for the model type. With
    ``strict`` (the default), keys the model lacks and keys of the wrong shape raise before anything is read,
    and entries the checkpoint does not fill raise after reading (tied weights count as filled with the
    tensor they share); whichever rank fails, every rank raises (``fail_together``). Returns this rank's
    :class:`~models.checkpoint.LoadResult`; keys skipped as other ranks' experts are in none of its fields.
    """
    if converter == "auto":
        config = getattr(model, "config", None)
        converter = converter_for(config) if config is not None else None
    with fail_together(group, "loading a sharded checkpoint"):
        return _load(model, Path(path), converter, strict)
    raise AssertionError("unreachable")  # fail_together re-raises on every rank


def _load(model: nn.Module, path: Path, converter: CheckpointConverter | None, strict: bool) -> LoadResult:
    placements = placements_of(model)
    ranges = {id(m): _expert_rows(m, placements) for m in _members(converter) if _expert_aware(m)}
    local = _restricted(converter, ranges)
    files = checkpoint_files(path)

    headers: dict[str, tuple[int, ...]] = {}
    for file in files:
        with checkpoint_module.open_safetensors(file) as handle:
            for key in handle.keys():  # noqa: SIM118 (a safe_open handle is not iterable)
                headers[key] = tuple(handle.get_slice(key).get_shape())
    unexpected, misshaped = _shape_problems(headers, local, placements)
    if misshaped or (strict and unexpected):
        problems = [describe_key_problems([], unexpected)] if strict and unexpected else []
        problems += [f"wrong shape: {'; '.join(misshaped)}"] if misshaped else []
        raise CheckpointError(f"checkpoint {path} does not fit {type(model).__name__}: " + "; ".join(problems))

    loaded: dict[str, None] = {}

    def assign(pairs: Iterable[tuple[str, torch.Tensor]], *, sliced: bool = False) -> None:
        for key, tensor in pairs:
            placement = placements.get(key)
            if placement is None:
                if key not in unexpected:
                    unexpected.append(key)
                continue
            if key in loaded:
                raise CheckpointError(f"{key!r} is given twice by the checkpoint")
            shape = tuple(tensor.shape)
            cut = tensor if sliced and shape == placement.local_shape else None
            if not sliced and len(shape) == len(placement.global_shape):
                cut = _cut(tensor, placement)
            if cut is None:
                raise CheckpointError(
                    f"{key!r}: checkpoint shape {list(shape)}, the model's whole shape {list(placement.global_shape)} "
                    f"(this rank's part {list(placement.local_shape)})"
                )
            with torch.no_grad():
                placement.local.copy_(cut)
            loaded[key] = None

    for file in files:
        with checkpoint_module.open_safetensors(file) as handle:
            for key in handle.keys():  # noqa: SIM118
                target = _loaded_as(local, key)
                if target is not None:  # loaded unchanged (maybe renamed): this rank's slice only
                    if target in placements:
                        assign([(target, _read(handle, key, placements[target]))], sliced=True)
                    continue
                owner = _owner(local, key)
                assert owner is not None
                if _expert_aware(owner):
                    rows = ranges.get(id(_original(converter, key)))
                    expert = owner.expert_of(key)
                    if expert is not None:
                        if rows is not None and not rows[0] <= expert < rows[1]:
                            continue  # another rank's expert: not read, not converted
                        assign(owner.convert(key, handle.get_tensor(key)))
                        continue
                    if rows is not None and key in placements:
                        if rows[0] == rows[1]:
                            loaded[key] = None  # this rank holds none of these experts
                            continue
                        view = handle.get_slice(key)
                        stored = view.get_shape()
                        if stored[0] != placements[key].global_shape[0]:
                            raise CheckpointError(
                                f"{key!r}: checkpoint shape {list(stored)}, {placements[key].global_shape[0]} experts "
                                f"expected on dim 0 (the model's whole shape {list(placements[key].global_shape)})"
                            )
                        assign(owner.convert(key, view[rows[0] : rows[1]]))
                        continue
                assign(owner.convert(key, handle.get_tensor(key)))
    if local is not None:
        assign(local.finalize())

    state = model.state_dict(keep_vars=True)
    filled = {id(state[key]) for key in loaded}
    missing = [key for key in state if key not in loaded and id(state[key]) not in filled]
    if strict and (missing or unexpected):
        raise CheckpointError(
            f"checkpoint {path} does not fit {type(model).__name__}: {describe_key_problems(missing, unexpected)}"
        )
    return LoadResult(files=files, loaded=tuple(loaded), missing=tuple(missing), unexpected=tuple(unexpected))


def _original(converter: CheckpointConverter | None, key: str) -> CheckpointConverter | None:
    """The unrestricted member ``key`` goes to (the key of ``ranges``)."""
    return _owner(converter, key)


def _read(handle: Any, key: str, placement: Placement) -> torch.Tensor:
    """This rank's slice of ``key`` (nothing else leaves the disk); a whole tensor when this rank holds it all."""
    if placement.whole:
        return handle.get_tensor(key)
    if 0 in placement.local_shape:
        return torch.empty(placement.local_shape, dtype=placement.local.dtype)
    return handle.get_slice(key)[placement.index]
