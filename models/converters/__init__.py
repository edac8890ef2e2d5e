"""Checkpoint converters: rewrite a checkpoint's tensors into the layout the generated modeling expects.

A converter is streamed: the loader (``modelgraft.models.checkpoint.load_checkpoint``) reads one tensor at a time
and offers it to ``can_handle(key)``; a handled tensor goes through ``convert(key, tensor)``, which
returns the finished ``(key, tensor)`` pairs (possibly none, while it buffers pieces of a fused
tensor); after the last tensor ``finalize()`` returns what is left, or raises naming what is missing. The way back
is optional: ``export(key, tensor)`` turns one whole entry of the modeling into what the hub stores
(``export_pairs``; ``modelgraft.models.distributed.export`` writes a hub checkpoint with it).

Importing this package costs nothing (no torch): models register their converter factory by dotted
path (``register_converter``), like ``modelgraft.models.registry.register_model``. The converters themselves live
in submodules (``modelgraft.models.converters.moe``), imported when a converter is built.
"""

from modelgraft.models.converters.base import ChainedConverter, CheckpointConverter, ConversionError, export_pairs
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
    "export_pairs",
    "register_converter",
    "unregister_converter",
]
