"""Checkpoint converters: rewrite a checkpoint's tensors into the layout the generated modeling expects.

A converter is streamed: the loader (``modelgraft.models.checkpoint.load_checkpoint``) reads one tensor at a time
and offers it to ``can_handle(key)``; a handled tensor goes through ``convert(key, tensor)``, which
returns the finished ``(key, tensor)`` pairs (possibly none, while it buffers pieces of a fused
tensor); after the last tensor ``finalize()`` returns what is left, or raises naming what is missing.

Importing this package costs nothing (no torch): models register their converter factory by dotted
path (``register_converter``), like ``modelgraft.models.registry.register_model``. The converters themselves live
in submodules (``modelgraft.models.converters.moe``), imported when a converter is built.
"""

from modelgraft.models.converters.base import ChainedConverter, CheckpointConverter, ConversionError
from modelgraft.models.converters.registry import (
    CONVERTER_REGISTRY,
    converter_for,
    register_converter,
    unregister_converter,
)

__all__ = [
    "CONVERTER_REGISTRY",
    "ChainedConverter",
    "CheckpointConverter",
    "ConversionError",
    "converter_for",
    "register_converter",
    "unregister_converter",
]
