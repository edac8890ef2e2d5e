"""model_type -> dotted path of a converter factory ``factory(config) -> CheckpointConverter``.

Registration stores a string and imports nothing, so ``import models`` stays free of torch; the
factory is imported when a converter is requested for a config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from models.registry import RegistryError, UnknownEntryError, resolve_dotted

if TYPE_CHECKING:
    from models.converters.base import CheckpointConverter

__all__ = ["CONVERTER_REGISTRY", "converter_for", "register_converter", "unregister_converter"]

_DOTTED_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
_factories: dict[str, str] = {}

#: Read-only view: model_type -> dotted path of its converter factory.
CONVERTER_REGISTRY: Mapping[str, str] = MappingProxyType(_factories)


def register_converter(model_type: str, factory: str) -> None:
    """Register ``factory`` (dotted path of a callable taking the HF config) for ``model_type``."""
    if not isinstance(model_type, str) or not model_type:
        raise RegistryError(f"model_type must be a non-empty string, got {model_type!r}")
    if not isinstance(factory, str) or not _DOTTED_PATH.match(factory):
        raise RegistryError(f"{model_type!r} converter factory must be a dotted import path, got {factory!r}")
    if model_type in _factories:
        raise RegistryError(f"CONVERTER_REGISTRY: model_type {model_type!r} is already registered")
    _factories[model_type] = factory


def unregister_converter(model_type: str) -> None:
    """Remove ``model_type``'s converter (tests that register throwaway ones clean up with it)."""
    if model_type not in _factories:
        raise UnknownEntryError(f"CONVERTER_REGISTRY: model_type {model_type!r} has no converter")
    del _factories[model_type]


def converter_for(config: Any) -> CheckpointConverter | None:
    """A fresh converter for ``config.model_type``, or None when the model needs no conversion."""
    path = _factories.get(config.model_type)
    if path is None:
        return None
    factory = resolve_dotted(path)
    if not callable(factory):
        raise TypeError(f"CONVERTER_REGISTRY: {path!r} is not callable")
    return factory(config)
