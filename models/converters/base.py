"""The streamed converter protocol, its error, and a combinator; free of torch at import time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

__all__ = ["ChainedConverter", "CheckpointConverter", "ConversionError", "export_pairs"]


class ConversionError(ValueError):
    """A checkpoint the converter cannot turn into the model's layout (missing pieces, bad shapes, conflicts)."""


@runtime_checkable
class CheckpointConverter(Protocol):
    """Streamed checkpoint conversion; one instance converts one checkpoint, then is discarded."""

    def can_handle(self, key: str) -> bool:
        """True if ``key`` is for this converter; other keys are loaded as they are."""
        ...

    def convert(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """The finished ``(key, tensor)`` pairs ``key`` completes; ``[]`` while pieces are buffered."""
        ...

    def finalize(self) -> list[tuple[str, torch.Tensor]]:
        """What is still buffered once every tensor was seen; raises ``ConversionError`` if incomplete."""
        ...


def export_pairs(
    converter: CheckpointConverter | None, key: str, tensor: torch.Tensor
) -> list[tuple[str, torch.Tensor]]:
    """The way back: one whole entry of the modeling's state dict as the hub checkpoint stores it.

    A converter may have ``export(key, tensor)``, the inverse of its ``convert`` for one whole entry (fused
    experts split back into the hub's per-expert linears, renamed keys given their hub names); a converter
    without it, or no converter, writes the entry unchanged (its hub layout is the modeling's).
    """
    export = getattr(converter, "export", None)
    return [(key, tensor)] if export is None else export(key, tensor)


class ChainedConverter:
    """Several converters as one: a key goes to the first that handles it; ``finalize`` asks each in turn.

    This is how a model combines conversions, e.g. a renaming step in front of the fused-experts one.
    """

    def __init__(self, *converters: CheckpointConverter) -> None:
        self.converters = converters

    def _owner(self, key: str) -> CheckpointConverter | None:
        return next((c for c in self.converters if c.can_handle(key)), None)

    def can_handle(self, key: str) -> bool:
        return self._owner(key) is not None

    def convert(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        owner = self._owner(key)
        if owner is None:
            raise ConversionError(f"no converter of the chain handles {key!r}")
        return owner.convert(key, tensor)

    def finalize(self) -> list[tuple[str, torch.Tensor]]:
        return [pair for converter in self.converters for pair in converter.finalize()]

    def export(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """The members' exports in reverse order: loading runs them first to last (a rename, then the fusing
        of experts), so the way back unfuses first and renames after."""
        pairs = [(key, tensor)]
        for converter in reversed(self.converters):
            pairs = [out for k, t in pairs for out in export_pairs(converter, k, t)]
        return pairs
