"""Resumable sharded training checkpoints with ``torch.distributed.checkpoint`` (DCP).

:func:`save_train_state` writes, from every rank at once, what a run needs to continue as if it had never
stopped: the model, the optimizer state, the learning-rate scheduler, the step, the data position and each
rank's random number generators. :func:`load_train_state` reads it back into a model sharded the same way or differently
(another world size, other ep sizes): DCP reads each rank's part of every tensor, whatever layout wrote it.

* Model and optimizer: ``torch.distributed.checkpoint.state_dict.get_state_dict`` /
  ``set_state_dict`` (keys by parameter name, FSDP's DTensors as they are; DCP reshards them).
* Expert-parallel parameters are plain local tensors holding different experts on different ep ranks
  under one name, which DCP would take for replicas and save once. They are saved per expert instead
  (``experts.<name>.<e>``, and ``experts.<name>.<state>.<e>`` for the optimizer's moments): under EP, and
  under EP x FSDP when FSDP splits the experts dim, each expert lives on exactly one rank of an ep
  replica, so every rank writes the experts it holds and reads the ones it holds after loading, whatever
  the ep size was. When FSDP splits the experts' rows instead (dim 1: the local experts do not divide),
  each expert is a DTensor of its own on FSDP's mesh, which DCP reshards like any other.
* Step, data position and the saved world size: one pickled record, the same on every rank. The LR
  scheduler's ``state_dict`` (its step count and last learning rates; the optimizer's own ``lr`` is in the
  optimizer state) is a second one: it is the same on every rank, however the model is sharded.
* HSDP: the replicas' DTensors carry a ``Replicate`` placement on the replicate dim, which DCP writes once
  and reads into every replica, so an HSDP run saves and resumes like an FSDP one, and reshards to either.
* Random states (torch CPU and, when present, CUDA; Python's ``random``): one record per rank. NumPy's
  is not saved: numpy is no dependency of the runtime (a loader that draws from it saves its own state
  in ``data_position``).
  A run resumed on fewer ranks continues rank ``r``'s streams on rank ``r``; on more ranks, rank ``r``
  takes those of rank ``r % saved_world``.

Collective: every rank calls both functions. The data position is whatever the caller's loader needs
to continue (an int, a dict); it is pickled.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor, Shard
from torch.optim.lr_scheduler import LRScheduler

from modelgraft.models.distributed.activation_checkpointing import strip_checkpoint_prefix
from modelgraft.models.distributed.expert_parallel import expert_shards
from modelgraft.models.distributed.sharded_load import placements_of

__all__ = ["TrainProgress", "load_train_state", "save_train_state"]


@dataclass(frozen=True)
class TrainProgress:
    """Where a run stood when it was saved."""

    #: Optimizer steps taken.
    step: int
    #: What the data loader needs to continue (the caller's own value, pickled).
    data_position: Any
    #: Ranks of the run that saved.
    world_size: int


def _rank_world() -> tuple[int, int]:
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _Pickled:
    """A value DCP stores as bytes; ``Stateful``, since ``dcp.load`` hands top-level values back only that way."""

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def state_dict(self) -> dict[str, bytes]:
        buffer = io.BytesIO()
        torch.save(self.value, buffer)  # one opaque value: DCP would flatten a dict and refuse some leaves
        return {"pickled": buffer.getvalue()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.value = torch.load(io.BytesIO(state_dict["pickled"]), weights_only=False)


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _local(tensor: torch.Tensor) -> torch.Tensor:
    if isinstance(tensor, DTensor):
        with torch.no_grad():
            return tensor.to_local()
    return tensor


def _one_expert(tensor: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
    """One expert's part of ``tensor`` held here (``row``, a view of the local storage), as DCP should see it.

    FSDP shards an expert unit on dim 0 (whole experts: ``row`` is the whole expert, the same on every
    replica) or, when the local experts do not divide, on dim 1: then several ranks hold parts of the same
    expert, and ``row`` becomes a DTensor of the one expert on the same mesh, sharded one dim lower.
    """
    if not isinstance(tensor, DTensor) or any(isinstance(p, Shard) and p.dim == 0 for p in tensor.placements):
        return row
    placements = [Shard(p.dim - 1) if isinstance(p, Shard) else p for p in tensor.placements]
    shape = tensor.shape[1:]
    stride = torch.empty(shape, device="meta").stride()
    return DTensor.from_local(row, tensor.device_mesh, placements, run_check=False, shape=shape, stride=stride)


def _split_experts(
    model: nn.Module, model_sd: dict[str, Any], optim_sd: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
    """The two state dicts without the expert-parallel tensors, and those tensors one expert per key.

    The per-expert tensors are views of the local storage, so DCP's load writes straight into it. Names are
    the unwrapped model's, as ``get_state_dict`` spells them (activation checkpointing's wrapper stripped).
    """
    shards = {strip_checkpoint_prefix(name): shard for name, shard in expert_shards(model).items()}
    if not shards:
        return model_sd, optim_sd, {}
    other_dim = sorted(name for name, shard in shards.items() if shard.dim != 0)
    if other_dim:
        raise ValueError(
            f"save_train_state splits expert-parallel tensors into whole experts along dim 0, but the plan splits "
            f"{', '.join(other_dim)} on another dim"
        )
    names = set(shards)
    placements = {strip_checkpoint_prefix(name): placement for name, placement in placements_of(model).items()}
    experts: dict[str, torch.Tensor] = {}

    def rows(name: str, key: str, tensor: torch.Tensor) -> None:
        start, stop = placements[name].index[0].start, placements[name].index[0].stop
        local = _local(tensor)
        if local.shape[0] != stop - start:
            raise ValueError(f"{key}: {local.shape[0]} local rows, but this rank holds experts {start}-{stop - 1}")
        for offset, expert in enumerate(range(start, stop)):
            experts[f"{key}.{expert}"] = _one_expert(tensor, local[offset])

    model_rest = {}
    for key, value in model_sd.items():
        if key in names:
            rows(key, key, value)
        else:
            model_rest[key] = value
    state_rest: dict[str, Any] = {}
    for name, states in optim_sd.get("state", {}).items():
        if name not in names:
            state_rest[name] = states
            continue
        kept = {}
        for state_name, value in states.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:  # the moments, shaped like the parameter
                rows(name, f"{name}.{state_name}", value)
            else:
                kept[state_name] = value  # AdamW's step: one scalar, the same on every rank
        state_rest[name] = kept
    return model_rest, {**optim_sd, "state": state_rest}, experts


def save_train_state(
    path: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    step: int,
    data_position: Any = None,
    scheduler: LRScheduler | None = None,
) -> None:
    """Save model, optimizer, ``scheduler``, ``step``, ``data_position`` and every rank's RNG states to the
    folder ``path``."""
    rank, world = _rank_world()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    model_rest, optim_rest, experts = _split_experts(model, model_sd, optim_sd)
    progress = {"step": step, "data_position": data_position, "world_size": world, "scheduler": scheduler is not None}
    payload = {
        "model": model_rest,
        "optim": optim_rest,
        "experts": experts,
        "progress": _Pickled(progress),
        f"rng.{rank}": _Pickled(_rng_state()),
    }
    if scheduler is not None:
        payload["scheduler"] = _Pickled(scheduler.state_dict())
    dcp.save(payload, checkpoint_id=str(path))


def load_train_state(
    path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer, *, scheduler: LRScheduler | None = None
) -> TrainProgress:
    """Restore what :func:`save_train_state` wrote into ``model``, ``optimizer`` and ``scheduler`` (sharded
    like the saving run or otherwise) and this rank's RNG states; returns the step and data position to
    continue from. A scheduler given here that was not saved, or saved and not given, is refused before
    anything is loaded (on every rank alike: the record read first is the same everywhere)."""
    rank, _ = _rank_world()
    record = _Pickled()
    dcp.load({"progress": record}, checkpoint_id=str(path))
    progress = record.value
    saved_scheduler = progress.get("scheduler", False)
    if saved_scheduler != (scheduler is not None):
        raise ValueError(
            f"{path}: saved {'with' if saved_scheduler else 'without'} an LR scheduler, loaded "
            f"{'with' if scheduler is not None else 'without'} one; pass scheduler= to both or to neither"
        )
    model_sd, optim_sd = get_state_dict(model, optimizer)  # creates the optimizer's state to load into
    model_rest, optim_rest, experts = _split_experts(model, model_sd, optim_sd)
    rng_key = f"rng.{rank % progress['world_size']}"
    rng = _Pickled()
    scheduler_state = _Pickled()
    payload = {"model": model_rest, "optim": optim_rest, "experts": experts, rng_key: rng}
    if scheduler is not None:
        payload["scheduler"] = scheduler_state
    dcp.load(payload, checkpoint_id=str(path))
    # DCP loads tensors in place but replaces other values (param groups' lr, ...) in the dicts it was given.
    model_sd.update(model_rest)
    for name, states in optim_rest["state"].items():
        optim_sd["state"][name].update(states)
    optim_sd.update({key: value for key, value in optim_rest.items() if key != "state"})
    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)
    if scheduler is not None:
        scheduler.load_state_dict(scheduler_state.value)
    _set_rng_state(rng.value)
    return TrainProgress(
        step=progress["step"], data_position=progress["data_position"], world_size=progress["world_size"]
    )
