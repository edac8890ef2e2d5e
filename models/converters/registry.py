"""model_type -> dotted path of a converter factory ``factory(config) -> CheckpointConverter``.

Registration stores a string and imports nothing, so ``import modelgraft.models`` stays free of torch; the
factory is imported when a converter is requested for a config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelgraft.models.registry import FactoryRegistry, resolve_dotted

if TYPE_CHECKING:
    from modelgraft.models.converters.base import CheckpointConverter

__all__ = ["CONVERTER_REGISTRY", "converter_for", "register_converter", "unregister_converter"]

#: model_type -> dotted path of its converter factory (the same registry type as the model registries).
CONVERTER_REGISTRY = FactoryRegistry("CONVERTER_REGISTRY")


def register_converter(model_type: str, factory: str) -> None:
    """Register ``factory`` (dotted path of a callable taking the HF config) for ``model_type``."""
    CONVERTER_REGISTRY.register(model_type, factory)


def unregister_converter(model_type: str) -> None:
    """Remove ``model_type``'s converter (tests that register throwaway ones clean up with it)."""
    CONVERTER_REGISTRY.unregister(model_type)


def converter_for(config: Any) -> CheckpointConverter | None:
    """A fresh converter for ``config.model_type``, or None when the model needs no conversion."""
    path = CONVERTER_REGISTRY.get(config.model_type)
    if path is None:
        return None
    factory = resolve_dotted(path)
    if not callable(factory):
        raise TypeError(f"CONVERTER_REGISTRY: {path!r} is not callable")
    return factory(config)
