"""Registries of models by HF ``model_type``: generated modeling modules, config and processor classes.

Entries are dotted import paths, resolved only when looked up. Registration therefore costs nothing,
so generation-time code (which must never import torch or transformers) can ``import modelgraft.models`` and see
every model, while run-time code pays for an import only when it asks for a class.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Mapping
from types import MappingProxyType, ModuleType
from typing import Any, Generic, TypeVar

__all__ = [
    "BACKENDS",
    "BACKEND_KERNELS",
    "MODELING_REGISTRY",
    "MODEL_CONFIG_REGISTRY",
    "MODEL_PROCESSOR_REGISTRY",
    "ClassRegistry",
    "FactoryRegistry",
    "ModelingRegistry",
    "ProcessorRegistry",
    "RegistryError",
    "UnknownEntryError",
    "check_dotted_path",
    "register_model",
    "resolve_dotted",
    "unregister_model",
]

#: Every backend a model can be built for, with the kernel family the loader binds for it (None: only the
#: ops asked for). Backends differ in kernels, bound to op slots at run time, not in code: one generated
#: module, registered as ``gpu``, serves every backend, and a backend registers a module of its own only
#: when its code really differs (docs/adding-a-model.md, "Phase 4: register the model"). ``gpu`` binds
#: nothing by default because the same module runs on CPU too, and Liger is a choice (``OpsConfig``).
BACKEND_KERNELS: Mapping[str, str | None] = MappingProxyType({"gpu": None, "npu": "npu"})

#: The backend names, ``gpu`` first.
BACKENDS: tuple[str, ...] = tuple(BACKEND_KERNELS)

_DOTTED_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")

_V = TypeVar("_V")


class RegistryError(ValueError):
    """A registration that would make the registries inconsistent (duplicate, malformed path, bad backend)."""


class UnknownEntryError(KeyError):
    """A lookup of something nobody registered; the message lists what is registered."""

    def __str__(self) -> str:
        # KeyError would print the repr of its argument, quotes and escapes included.
        return str(self.args[0])


def resolve_dotted(path: str) -> Any:
    """Import ``path`` as a module, or as an attribute of the longest importable module prefix.

    ``"transformers.Qwen3Config"`` and ``"transformers.models.qwen3.configuration_qwen3.Qwen3Config"``
    both name a class; ``"modelgraft.models.qwen3.generated.patched_modeling_qwen3_gpu"`` names a module. A module
    that exists but fails to import (a missing dependency inside it) raises its own error unchanged.
    """
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if path != missing and not path.startswith(missing + "."):
            raise
        parent, _, attr = path.rpartition(".")
        if not parent:
            raise ImportError(f"cannot resolve {path!r}: no module named {path!r}") from exc
    owner = resolve_dotted(parent)
    try:
        return getattr(owner, attr)
    except AttributeError:
        raise ImportError(f"cannot resolve {path!r}: {parent!r} has no attribute {attr!r}") from None


def check_dotted_path(path: str, what: str, *, attribute: bool = False) -> None:
    """Raise RegistryError unless ``path`` is a dotted import path (every registry's one rule).

    A module may be top-level (``mymodel``); with ``attribute`` the path names an attribute of a module
    (``pkg.mod.factory``), so it needs at least one dot.
    """
    if not isinstance(path, str) or not _DOTTED_PATH.match(path) or (attribute and "." not in path):
        of = " of an attribute (module.name)" if attribute else ""
        raise RegistryError(f"{what} must be a dotted import path{of}, got {path!r}")


class _Registry(Generic[_V]):
    """Mapping of model_type -> entry with duplicate-safe registration and self-explaining misses."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._entries: dict[str, _V] = {}

    def __contains__(self, model_type: object) -> bool:
        return model_type in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, model_types={sorted(self._entries)})"

    def _entry(self, model_type: str) -> _V:
        try:
            return self._entries[model_type]
        except KeyError:
            registered = ", ".join(sorted(self._entries)) or "none"
            raise UnknownEntryError(
                f"{self.name}: model_type {model_type!r} is not registered (registered: {registered})"
            ) from None

    def _check_free(self, model_type: str) -> None:
        if model_type in self._entries:
            raise RegistryError(f"{self.name}: model_type {model_type!r} is already registered")

    def _add(self, model_type: str, entry: _V) -> None:
        self._check_free(model_type)
        self._entries[model_type] = entry

    def _remove(self, model_type: str) -> None:
        self._entries.pop(model_type, None)


class ClassRegistry(_Registry[str]):
    """model_type -> one class, given by dotted path (config classes, processor classes)."""

    def path(self, model_type: str) -> str:
        """The registered dotted path, without importing anything."""
        return self._entry(model_type)

    def __getitem__(self, model_type: str) -> type:
        cls = self._resolve(self._entry(model_type))
        if not isinstance(cls, type):
            raise TypeError(f"{self.name}: {self._entry(model_type)!r} is not a class")
        return cls

    def _resolve(self, path: str) -> Any:
        return resolve_dotted(path)


class ProcessorRegistry(ClassRegistry):
    """model_type -> processor class, importable without torchvision where that is the same code.

    transformers gives a placeholder for a processor whose module imports torchvision for helpers that the
    model's PIL image processing module defines too (Pixtral's, the processor of mistral3); a lookup gives the
    class loaded with those helpers taken from the PIL module instead (``modelgraft.models.processor_imports``).
    """

    def _resolve(self, path: str) -> Any:
        # Imported here: it imports transformers, and importing the registry must not.
        from modelgraft.models.processor_imports import importable_processor_class

        return importable_processor_class(path)


class FactoryRegistry(_Registry[str]):
    """model_type -> dotted path of a callable (checkpoint-converter factories); a Mapping of the paths."""

    def __getitem__(self, model_type: str) -> str:
        return self._entry(model_type)

    def get(self, model_type: str, default: str | None = None) -> str | None:
        """The registered dotted path, or ``default``."""
        return self._entries.get(model_type, default)

    def register(self, model_type: str, path: str) -> None:
        """Add ``model_type`` -> ``path``; a malformed path or a second registration is a RegistryError."""
        if not isinstance(model_type, str) or not model_type:
            raise RegistryError(f"model_type must be a non-empty string, got {model_type!r}")
        check_dotted_path(path, f"{model_type!r} {self.name} entry", attribute=True)
        self._add(model_type, path)

    def unregister(self, model_type: str) -> None:
        """Remove ``model_type``; an unknown one is an UnknownEntryError naming what is registered."""
        self._entry(model_type)
        self._remove(model_type)


class ModelingRegistry(_Registry[Mapping[str, str]]):
    """model_type -> {backend -> dotted path of the generated modeling module}; ``gpu``'s serves the others."""

    def backends(self, model_type: str) -> tuple[str, ...]:
        """Backends with a generated module of their own, in ``BACKENDS`` order: ``gpu``, and any whose code differs.

        Every backend of ``BACKENDS`` can be built; the others run ``gpu``'s module. These are the distinct
        modules to test and to import.
        """
        modules = self._entry(model_type)
        return tuple(backend for backend in BACKENDS if backend in modules)

    def module_paths(self) -> set[str]:
        """Every registered module path, all model types and backends, without importing anything."""
        return {path for modules in self._entries.values() for path in modules.values()}

    def module_path(self, model_type: str, backend: str = "gpu") -> str:
        """The dotted path of ``backend``'s generated module (``gpu``'s, unless it has one of its own), not imported."""
        modules = self._entry(model_type)
        if backend not in BACKEND_KERNELS:
            raise UnknownEntryError(f"{self.name}: unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
        return modules.get(backend, modules["gpu"])

    def get_module(self, model_type: str, backend: str = "gpu") -> ModuleType:
        """Import and return the generated modeling module."""
        path = self.module_path(model_type, backend)
        module = resolve_dotted(path)
        if not isinstance(module, ModuleType):
            raise TypeError(f"{self.name}: {path!r} is not a module")
        return module

    def get_class(self, model_type: str, architecture: str, backend: str = "gpu") -> type:
        """The class named ``architecture`` (e.g. ``"Qwen3ForCausalLM"``) in the generated module."""
        module = self.get_module(model_type, backend)
        cls = getattr(module, architecture, None)
        if not isinstance(cls, type):
            available = sorted(
                name
                for name, value in vars(module).items()
                if isinstance(value, type) and value.__module__ == module.__name__
            )
            raise UnknownEntryError(
                f"{self.name}: {module.__name__} ({model_type!r}, {backend!r}) defines no class {architecture!r} "
                f"(defines: {', '.join(available) or 'none'})"
            )
        return cls


MODELING_REGISTRY = ModelingRegistry("MODELING_REGISTRY")
MODEL_CONFIG_REGISTRY = ClassRegistry("MODEL_CONFIG_REGISTRY")
MODEL_PROCESSOR_REGISTRY = ProcessorRegistry("MODEL_PROCESSOR_REGISTRY")


def register_model(
    model_type: str,
    *,
    modeling: Mapping[str, str],
    config: str,
    processor: str | None = None,
) -> None:
    """Register one model in all three registries at once, or in none if anything is wrong.

    ``modeling`` maps backend -> dotted module path of the generated modeling file and must include
    ``"gpu"``, whose module serves every backend not listed; list another backend only when its generated
    code differs (``patchgen`` refuses a config whose output equals another's). ``config`` and
    ``processor`` are dotted class paths. Nothing is imported here.
    """
    if not isinstance(model_type, str) or not model_type:
        raise RegistryError(f"model_type must be a non-empty string, got {model_type!r}")
    unknown = sorted(set(modeling) - set(BACKENDS))
    if unknown:
        raise RegistryError(f"{model_type!r}: unknown backend(s) {unknown} (known: {', '.join(BACKENDS)})")
    if "gpu" not in modeling:
        raise RegistryError(f"{model_type!r}: modeling must include the 'gpu' backend, got {sorted(modeling)}")
    for backend, path in modeling.items():
        check_dotted_path(path, f"{model_type!r} modeling[{backend!r}]")
        if backend != "gpu" and path == modeling["gpu"]:
            raise RegistryError(
                f"{model_type!r}: modeling[{backend!r}] is the 'gpu' module; leave {backend!r} out, the 'gpu' "
                "module serves every backend without a module of its own"
            )
    check_dotted_path(config, f"{model_type!r} config")
    if processor is not None:
        check_dotted_path(processor, f"{model_type!r} processor")

    registries: list[_Registry[Any]] = [MODELING_REGISTRY, MODEL_CONFIG_REGISTRY]
    if processor is not None:
        registries.append(MODEL_PROCESSOR_REGISTRY)
    for registry in registries:
        registry._check_free(model_type)

    MODELING_REGISTRY._add(model_type, MappingProxyType(dict(modeling)))
    MODEL_CONFIG_REGISTRY._add(model_type, config)
    if processor is not None:
        MODEL_PROCESSOR_REGISTRY._add(model_type, processor)


def unregister_model(model_type: str) -> None:
    """Remove ``model_type`` from every registry (tests that register throwaway models clean up with it)."""
    MODELING_REGISTRY._entry(model_type)  # raises UnknownEntryError naming what is registered
    for registry in (MODELING_REGISTRY, MODEL_CONFIG_REGISTRY, MODEL_PROCESSOR_REGISTRY):
        registry._remove(model_type)
