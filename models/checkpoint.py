"""Load a safetensors checkpoint into a built model, one tensor at a time, through the model's converter.

``load_checkpoint(model, path)`` reads a ``.safetensors`` file, a folder of them, or a sharded folder
with ``model.safetensors.index.json``. Tensors are read one by one with ``safetensors.safe_open`` and
copied into the model's parameters and buffers right away, so the checkpoint is never held in memory
as a whole; a converter (``modelgraft.models.converters``) may hold the pieces of one fused tensor until they are
complete. By default the converter registered for ``model.config.model_type`` is used, if any.

``read`` (optional) decides how each key is read from its open file: a whole tensor, part of one
(``handle.get_slice(key)[...]``), or None to skip the key unread. The expert-parallel loader
(``modelgraft.models.distributed.checkpoint``) uses it so that a rank reads only its own experts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors import safe_open

from modelgraft.models.converters import CheckpointConverter, converter_for

__all__ = [
    "CheckpointError",
    "LoadResult",
    "TensorReader",
    "checkpoint_files",
    "describe_key_problems",
    "load_checkpoint",
    "read_whole",
]

INDEX_FILE = "model.safetensors.index.json"

#: ``read(handle, key)``: the tensor to load for ``key`` from an open ``safe_open`` handle, or None to skip it.
TensorReader = Callable[[Any, str], "torch.Tensor | None"]


class CheckpointError(ValueError):
    """A checkpoint that does not fit the model: missing or unexpected keys, a shape mismatch, no files."""


@dataclass(frozen=True)
class LoadResult:
    """What a load did; with ``strict=True`` (the default) ``missing`` and ``unexpected`` are empty."""

    files: tuple[Path, ...]
    loaded: tuple[str, ...]
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]


def checkpoint_files(path: str | Path) -> tuple[Path, ...]:
    """The safetensors files of a checkpoint: the file itself, the shards of its index, or every file."""
    path = Path(path)
    if path.is_file():
        return (path,)
    if not path.is_dir():
        raise CheckpointError(f"no checkpoint at {path}")
    index = path / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        files = tuple(path / name for name in sorted(set(weight_map.values())))
        absent = [f.name for f in files if not f.is_file()]
        if absent:
            raise CheckpointError(f"{index} lists shard(s) that do not exist: {', '.join(absent)}")
    else:
        files = tuple(sorted(path.glob("*.safetensors")))
    if not files:
        raise CheckpointError(f"{path} holds no .safetensors files")
    return files


def read_whole(handle: Any, key: str) -> torch.Tensor:
    """The default :data:`TensorReader`: the whole tensor."""
    return handle.get_tensor(key)


def _stream(files: Iterable[Path], read: TensorReader = read_whole) -> Iterator[tuple[str, torch.Tensor]]:
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for key in handle.keys():  # noqa: SIM118  (a safe_open handle is not iterable)
                tensor = read(handle, key)
                if tensor is not None:
                    yield key, tensor


def _listed(keys: Iterable[str], limit: int = 10) -> str:
    keys = sorted(keys)
    more = f" (and {len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def describe_key_problems(missing: Iterable[str], unexpected: Iterable[str]) -> str:
    """One phrase naming the keys a checkpoint lacks and the keys the model lacks (for error messages)."""
    missing, unexpected = list(missing), list(unexpected)
    problems = []
    if missing:
        problems.append(f"missing from the checkpoint: {_listed(missing)}")
    if unexpected:
        problems.append(f"not in the model: {_listed(unexpected)}")
    return "; ".join(problems)


def load_checkpoint(
    model: torch.nn.Module,
    path: str | Path,
    *,
    converter: CheckpointConverter | Literal["auto"] | None = "auto",
    strict: bool = True,
    read: TensorReader | None = None,
) -> LoadResult:
    """Copy the checkpoint at ``path`` into ``model`` (its ``state_dict`` entries, in place).

    ``converter="auto"`` uses the converter registered for ``model.config.model_type`` (none: keys are
    loaded as they are); pass a converter to use that one, or None for no conversion. Each tensor is
    cast to the dtype of the entry it fills. A shape mismatch raises at once; with ``strict`` a key the
    model lacks, or a model entry the checkpoint does not fill (tied weights count as filled when the
    tensor they share is), raises after reading everything, naming the keys. ``read`` replaces how a
    key is read (default :func:`read_whole`); a key it returns None for is skipped, neither loaded nor
    reported unexpected. Keys matching the model's ``_keys_to_ignore_on_load_unexpected`` patterns (what
    ``from_pretrained`` ignores on purpose: an Omni checkpoint's speech side) are skipped unread too.
    """
    if converter == "auto":
        config = getattr(model, "config", None)
        converter = converter_for(config) if config is not None else None
    files = checkpoint_files(path)
    targets = model.state_dict()
    loaded: dict[str, None] = {}
    unexpected: list[str] = []

    def assign(pairs: Iterable[tuple[str, torch.Tensor]]) -> None:
        for key, tensor in pairs:
            target = targets.get(key)
            if target is None:
                unexpected.append(key)
                continue
            if key in loaded:
                raise CheckpointError(f"{key!r} is given twice by the checkpoint")
            if tuple(target.shape) != tuple(tensor.shape):
                raise CheckpointError(
                    f"{key!r}: checkpoint shape {list(tensor.shape)}, model shape {list(target.shape)}"
                )
            with torch.no_grad():
                target.copy_(tensor)
            loaded[key] = None

    reader = read or read_whole
    ignored = [re.compile(pattern) for pattern in getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ()]
    if ignored:

        def reader(handle: Any, key: str, read_key: TensorReader = reader) -> torch.Tensor | None:
            return None if any(pattern.search(key) for pattern in ignored) else read_key(handle, key)

    for key, tensor in _stream(files, reader):
        if converter is not None and converter.can_handle(key):
            assign(converter.convert(key, tensor))
        else:
            assign([(key, tensor)])
    if converter is not None:
        assign(converter.finalize())

    filled = {targets[key].data_ptr() for key in loaded}
    missing = [key for key in targets if key not in loaded and targets[key].data_ptr() not in filled]
    if strict and (missing or unexpected):
        raise CheckpointError(
            f"checkpoint {path} does not fit {type(model).__name__}: {describe_key_problems(missing, unexpected)}"
        )
    return LoadResult(files=files, loaded=tuple(loaded), missing=tuple(missing), unexpected=tuple(unexpected))
