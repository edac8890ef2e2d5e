"""Temporary registrations, so tests can point a throwaway model_type at any module and leave no trace."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from modelgraft.models.registry import register_model, unregister_model


@contextmanager
def registered_model(
    model_type: str, *, modeling: Mapping[str, str], config: str, processor: str | None = None
) -> Iterator[str]:
    """``register_model`` for the duration of a block; yields ``model_type``."""
    register_model(model_type, modeling=modeling, config=config, processor=processor)
    try:
        yield model_type
    finally:
        unregister_model(model_type)
