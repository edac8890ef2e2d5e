"""Write a sharded run's model as one consolidated hub checkpoint that upstream's ``from_pretrained`` loads.

A run sharded by FSDP2, HSDP and/or expert parallelism holds every tensor in pieces spread over the ranks.
:func:`export_hub_checkpoint` walks the model's state dict in its (every rank's same) order and, one entry at
a time, gathers the whole tensor (``DTensor.full_tensor`` for FSDP's shards; the ep ranks' chunks through
:func:`~models.distributed.expert_parallel.full_tensor`), hands it to the model type's converter's way back
(``export``: fused experts split into the hub's per-expert linears, or transposed, renamed keys given their
hub names; ``modelgraft.models.converters.export_pairs``) and drops it again. Only the writing rank keeps what
the converter returns, until a safetensors file of ``max_shard_size`` is full and written. So no rank ever
holds more than one whole entry (one layer's fused experts at most) plus, on the writer, one file's worth.

The folder gets what ``save_pretrained`` writes for the weights: ``model.safetensors``, or
``model-0000i-of-0000n.safetensors`` files with ``model.safetensors.index.json`` when one file would pass
``max_shard_size``, each with ``{"format": "pt"}`` metadata, and the model's ``config.json``. They replace the
weights an earlier export (or ``save_pretrained``) left in the folder, and only once all of them are written:
an export that fails leaves the folder as it was. Tied entries
(``lm_head.weight`` sharing ``embed_tokens.weight``) are written once, under the first name, as
``save_pretrained`` does; non-persistent buffers are not written (no checkpoint holds them).

Collective: every rank of the run calls it. An error on the writer (a full disk, a converter refusing a
tensor) does not leave the other ranks waiting in the next gather: the writer stops writing but joins
every remaining gather, and the error is raised on every rank at the end (``fail_together``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch import nn
from torch.distributed.tensor import DTensor

from modelgraft.models.converters import CheckpointConverter, converter_for, export_pairs
from modelgraft.models.distributed.activation_checkpointing import strip_checkpoint_prefix
from modelgraft.models.distributed.expert_parallel import expert_shards, full_tensor
from modelgraft.models.distributed.guard import fail_together
from modelgraft.models.distributed.mesh import ParallelState

__all__ = ["INDEX_NAME", "export_hub_checkpoint"]

#: The index file ``from_pretrained`` reads for a checkpoint in several files.
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
#: save_pretrained's default file size.
DEFAULT_SHARD_SIZE = 5 * 2**30


class _ShardWriter:
    """The writing rank's files: tensors are added one by one and a file is written whenever the next would
    make it pass ``max_bytes`` (a tensor larger than that gets a file of its own)."""

    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.pending: dict[str, torch.Tensor] = {}
        self.pending_bytes = 0
        self.files: list[dict[str, int]] = []  # per written file: key -> bytes
        self.total = 0

    def add(self, key: str, tensor: torch.Tensor) -> None:
        size = tensor.numel() * tensor.element_size()
        if self.pending and self.pending_bytes + size > self.max_bytes:
            self.flush()
        if key in self.pending or any(key in file for file in self.files):
            raise ValueError(f"the export gives {key!r} twice")
        self.pending[key] = tensor.detach().to("cpu").contiguous()
        self.pending_bytes += size
        self.total += size

    def flush(self) -> None:
        if not self.pending:
            return
        number = len(self.files) + 1
        save_file(self.pending, str(self.folder / f"part-{number:05d}.safetensors"), metadata={"format": "pt"})
        self.files.append({key: t.numel() * t.element_size() for key, t in self.pending.items()})
        self.pending, self.pending_bytes = {}, 0

    def finish(self) -> list[str]:
        """Name the files as ``save_pretrained`` does and write the index when there are several; returns the
        weight files' names."""
        self.flush()
        count = len(self.files)
        names = (
            [SINGLE_NAME] if count == 1 else [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]
        )
        for number, name in enumerate(names, start=1):
            os.replace(self.folder / f"part-{number:05d}.safetensors", self.folder / name)
        if count > 1:
            weight_map = {key: name for name, file in zip(names, self.files, strict=True) for key in file}
            index = {"metadata": {"total_size": self.total}, "weight_map": dict(sorted(weight_map.items()))}
            (self.folder / INDEX_NAME).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        return names


def _commit(staging: Path, folder: Path) -> None:
    """Move the finished export from ``staging`` into ``folder``, replacing the weights already there.

    Every loader reads a folder's top-level ``*.safetensors`` files, through the index when there is one, so
    an earlier export's files left next to the new ones would be loaded instead of them, or mixed with
    them. They go first, shards before the index (until the index goes, it names missing files, which every
    loader refuses), then the new shards, the index and the config arrive, each by one rename. A crash in
    between leaves an incomplete checkpoint that loaders refuse, never an old or mixed one that loads.
    Other files (a tokenizer, a README) stay.
    """
    for stale in sorted(folder.glob("*.safetensors")):
        stale.unlink()
    (folder / INDEX_NAME).unlink(missing_ok=True)
    arriving = sorted(staging.iterdir(), key=lambda f: (f.suffix != ".safetensors", f.name == CONFIG_NAME))
    for file in arriving:
        os.replace(file, folder / file.name)


def _whole(name: str, tensor: torch.Tensor, shards: dict[str, Any], state: ParallelState | None) -> torch.Tensor:
    """The whole entry on every rank (collective over the ranks that hold its pieces)."""
    tensor = tensor.detach()
    if name in shards:
        assert state is not None, f"{name} is split over ep ranks: pass the run's ParallelState"
        return full_tensor(tensor, shards[name], state)
    if isinstance(tensor, DTensor):
        return tensor.full_tensor()
    return tensor


def export_hub_checkpoint(
    model: nn.Module,
    state: ParallelState | None,
    path: str | Path,
    *,
    converter: CheckpointConverter | Literal["auto"] | None = "auto",
    max_shard_size: int = DEFAULT_SHARD_SIZE,
    dtype: torch.dtype | None = None,
    writer: int = 0,
) -> list[Path]:
    """Write ``model`` (sharded under ``state``) to the folder ``path`` in its hub layout; collective.

    ``converter="auto"`` takes the model type's registered converter (``export`` is its way back; a model
    without one is written as it is held). ``max_shard_size`` bytes per safetensors file, as
    ``save_pretrained``'s; ``dtype`` casts floating tensors (e.g. ``torch.bfloat16`` for a release) as they
    are written. Rank ``writer`` (a global rank) writes; every rank returns the written weight files.
    ``state`` None: a model of one process (nothing sharded), written by it.
    """
    config = getattr(model, "config", None)
    if converter == "auto":
        converter = converter_for(config) if config is not None else None
    folder = Path(path)
    writing = (state.rank if state is not None else 0) == writer
    failure: Exception | None = None
    out: _ShardWriter | None = None
    created = writing and not folder.exists()
    if writing:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # Written aside first (a hidden folder no loader reads), so a failure leaves the folder as it was.
            out = _ShardWriter(Path(tempfile.mkdtemp(prefix=".export-", dir=folder)), max_shard_size)
        except OSError as error:
            failure = error
    shards = expert_shards(model)
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:  # tied: the same parameter under a second name
            continue
        seen.add(id(tensor))
        whole = _whole(name, tensor, shards, state)  # every rank joins every gather, even after a failure
        if out is None or failure is not None:
            continue
        try:
            for key, value in export_pairs(converter, strip_checkpoint_prefix(name), whole):
                if dtype is not None and value.is_floating_point():
                    value = value.to(dtype)
                out.add(key, value)
        except Exception as error:  # noqa: BLE001 - raised on every rank below
            failure = error
        del whole
    files: list[Path] = []
    try:
        with fail_together(None, "exporting a hub checkpoint"):
            if failure is not None:
                raise failure
            if out is not None:
                names = out.finish()
                if config is not None:
                    config.save_pretrained(out.folder)
                _commit(out.folder, folder)
                files = [folder / name for name in names]
    finally:
        if out is not None:
            shutil.rmtree(out.folder, ignore_errors=True)
        if created and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    if state is not None and dist.is_initialized():
        shared: list[list[str] | None] = [[str(f) for f in files]]
        dist.broadcast_object_list(shared, src=writer)
        files = [Path(f) for f in shared[0] or []]
    return files
