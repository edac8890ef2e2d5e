"""Load a safetensors checkpoint into a built model, one tensor at a time, through the model's converter.

``load_checkpoint(model, path)`` reads a ``.safetensors`` file, a folder of them, or a sharded folder
with ``model.safetensors.index.json``. Tensors are read one by one with ``safetensors.safe_open`` and
copied into the model's parameters and buffers right away, so the checkpoint is never held in memory
as a whole; a converter (``modelgraft.models.converters``) may hold the pieces of one fused tensor until they are
complete. By default the converter registered for ``model.config.model_type`` is used, if any.

A load is all or nothing: the files' headers are checked first (every key through the converter, on meta
tensors), and only a checkpoint that fits is copied in; a refused one leaves the model as it was, and its
error names the file and the tensor. A converter must therefore work on meta tensors too (shapes only).

``read`` (optional) decides how each key is read from its open file: a whole tensor, part of one
(``handle.get_slice(key)[...]``), or None to skip the key unread. The expert-parallel loader
(``modelgraft.models.distributed.checkpoint``) uses it so that a rank reads only its own experts.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors import SafetensorError, safe_open

from modelgraft.models.converters import CheckpointConverter, ConversionError, converter_for

__all__ = [
    "CheckpointError",
    "LoadResult",
    "TensorReader",
    "checkpoint_files",
    "describe_key_problems",
    "load_checkpoint",
    "open_safetensors",
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


#: safetensors' dtype names; a dtype this torch lacks is left out (its tensors then fail the check, named).
_DTYPES = {
    name: getattr(torch, attr)
    for name, attr in {
        "BOOL": "bool",
        "U8": "uint8",
        "I8": "int8",
        "I16": "int16",
        "U16": "uint16",
        "I32": "int32",
        "U32": "uint32",
        "I64": "int64",
        "U64": "uint64",
        "F16": "float16",
        "BF16": "bfloat16",
        "F32": "float32",
        "F64": "float64",
        "F8_E4M3": "float8_e4m3fn",
        "F8_E5M2": "float8_e5m2",
    }.items()
    if hasattr(torch, attr)
}


class _HeaderSlice:
    """``get_slice``'s view of one tensor, answered from the file's header with meta tensors (no data read)."""

    def __init__(self, view: Any) -> None:
        self._view = view

    def get_shape(self) -> list[int]:
        return self._view.get_shape()

    def get_dtype(self) -> str:
        return self._view.get_dtype()

    def _meta(self) -> torch.Tensor:
        dtype = self.get_dtype()
        if dtype not in _DTYPES:
            raise CheckpointError(f"dtype {dtype} is not one torch {torch.__version__} can load")
        return torch.empty(self.get_shape(), dtype=_DTYPES[dtype], device="meta")

    def __getitem__(self, index: Any) -> torch.Tensor:
        return self._meta()[index]


class _HeaderHandle:
    """A ``safe_open`` handle whose tensors are meta tensors of the header's shapes and dtypes.

    The check before a load runs the reader and the converter through it: every key, shape and conversion
    is known, and every problem found, before a byte of data is read or a parameter changed.
    """

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def keys(self) -> list[str]:
        return self._handle.keys()

    def metadata(self) -> dict[str, str] | None:
        return self._handle.metadata()

    def get_slice(self, key: str) -> _HeaderSlice:
        return _HeaderSlice(self._handle.get_slice(key))

    def get_tensor(self, key: str) -> torch.Tensor:
        return self.get_slice(key)[...]


@contextmanager
def open_safetensors(file: Path) -> Iterator[Any]:
    """``safe_open`` of ``file``; a file that is not safetensors (truncated, corrupt) raises naming it."""
    try:
        handle = safe_open(str(file), framework="pt", device="cpu")
    except (SafetensorError, OSError) as error:
        raise CheckpointError(f"{file}: not a readable safetensors file ({error})") from error
    with handle as entered:
        yield entered


def _stream(files: Iterable[Path], read: TensorReader, header_only: bool) -> Iterator[tuple[Path, str, torch.Tensor]]:
    for file in files:
        with open_safetensors(file) as opened:
            handle = _HeaderHandle(opened) if header_only else opened
            for key in handle.keys():  # noqa: SIM118  (a safe_open handle is not iterable)
                tensor = _named(file, key, read, handle, key)
                if tensor is not None:
                    yield file, key, tensor


def _named(file: Path | str, key: str | None, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, with the file (and key) a failure came from in front of its message."""
    where = f"{file}: {key!r}" if key is not None else f"{file}"
    try:
        return fn(*args)
    except (CheckpointError, ConversionError) as error:
        raise type(error)(f"{where}: {error}") from error
    except (SafetensorError, RuntimeError, OSError) as error:
        raise CheckpointError(f"{where}: {type(error).__name__}: {error}") from error


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
    check: Callable[[LoadResult], None] | None = None,
) -> LoadResult:
    """Copy the checkpoint at ``path`` into ``model`` (its ``state_dict`` entries, in place): all or nothing.

    ``converter="auto"`` uses the converter registered for ``model.config.model_type`` (none: keys are
    loaded as they are); pass a converter to use that one, or None for no conversion. Each tensor is
    cast to the dtype of the entry it fills. ``read`` replaces how a key is read (default
    :func:`read_whole`); a key it returns None for is skipped, neither loaded nor reported unexpected.
    Keys the model would report unexpected that match its ``_keys_to_ignore_on_load_unexpected`` patterns (what
    ``from_pretrained`` ignores on purpose: an Omni checkpoint's speech side) are skipped unread too; a key that
    fills an entry of the model (or that the converter takes) loads whatever the patterns say, as in
    ``from_pretrained`` (A.X-K1's pattern ``mlp\\.post_mlp_layernorm`` is meant for dense layers' stray norms and
    also matches the sparse layers' own).

    Nothing is copied until the whole checkpoint has been checked from the files' headers: every file
    opens as safetensors, the converter accepts every key (it runs on meta tensors first), no entry is
    given twice, every shape fits and, with ``strict``, no key the model lacks is given and no model entry
    is left unfilled (tied weights count as filled when the tensor they share is). ``check``, if given, sees
    that :class:`LoadResult` and may raise to refuse the load too. A refused load leaves the model as it was,
    and its error names the file and the tensor. Only a file that changes or fails to read after that check
    can stop a load partway, and its error says so.
    """
    if converter == "auto":
        config = getattr(model, "config", None)
        converter = converter_for(config) if config is not None else None
    files = checkpoint_files(path)
    targets = model.state_dict()
    reader = read or read_whole
    ignored = [re.compile(pattern) for pattern in getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ()]
    if ignored:

        def reader(handle: Any, key: str, read_key: TensorReader = reader) -> torch.Tensor | None:
            wanted = key in targets or (converter is not None and converter.can_handle(key))
            if not wanted and any(pattern.search(key) for pattern in ignored):
                return None
            return read_key(handle, key)

    # The check: the same reads and conversions on meta tensors, with a copy of the (stateful) converter.
    planned = _run(files, path, targets, copy.deepcopy(converter), reader, header_only=True)
    if strict and (planned.missing or planned.unexpected):
        raise CheckpointError(
            f"checkpoint {path} does not fit {type(model).__name__}: "
            f"{describe_key_problems(planned.missing, planned.unexpected)}"
        )
    if check is not None:
        check(planned)
    try:
        return _run(files, path, targets, converter, reader, header_only=False)
    except (CheckpointError, ConversionError) as error:
        raise type(error)(
            f"{error} (the checkpoint changed or failed to read after it was checked: {type(model).__name__} now "
            "holds part of it; load it again)"
        ) from error


def _run(
    files: tuple[Path, ...],
    path: str | Path,
    targets: dict[str, torch.Tensor],
    converter: CheckpointConverter | None,
    reader: TensorReader,
    *,
    header_only: bool,
) -> LoadResult:
    """Read every key of ``files`` through ``converter`` into ``targets``; with ``header_only``, check only."""
    loaded: dict[str, None] = {}
    unexpected: list[str] = []

    def assign(pairs: Iterable[tuple[str, torch.Tensor]], source: str | None = None) -> None:
        """Copy (or, header only, check) each pair; errors name the model entry unless it is ``source``'s key."""
        for key, tensor in pairs:
            entry = "" if key == source else f"{key!r}: "
            target = targets.get(key)
            if target is None:
                unexpected.append(key)
                continue
            if key in loaded:
                raise CheckpointError(f"{entry}given twice by the checkpoint")
            if tuple(target.shape) != tuple(tensor.shape):
                raise CheckpointError(
                    f"{entry}checkpoint shape {list(tensor.shape)}, model shape {list(target.shape)}"
                )
            if not header_only:
                with torch.no_grad():
                    target.copy_(tensor)
            loaded[key] = None

    def take(key: str, tensor: torch.Tensor) -> None:
        if converter is not None and converter.can_handle(key):
            assign(converter.convert(key, tensor), key)
        else:
            assign([(key, tensor)], key)

    for file, key, tensor in _stream(files, reader, header_only):
        _named(file, key, take, key, tensor)
    if converter is not None:
        _named(f"checkpoint {path}", None, lambda: assign(converter.finalize()))

    filled = {targets[key].data_ptr() for key in loaded}
    missing = [key for key in targets if key not in loaded and targets[key].data_ptr() not in filled]
    return LoadResult(files=files, loaded=tuple(loaded), missing=tuple(missing), unexpected=tuple(unexpected))
