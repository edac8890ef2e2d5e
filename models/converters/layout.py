"""Which way round a checkpoint stores its expert matrices: declared, or shown by its own tensors.

An expert matrix is stored either as ``nn.Linear`` holds it, ``[out, in]`` ("fused", the modeling's layout:
per expert ``[I, H]`` for gate and up and ``[H, I]`` for down, fused ``[E, 2I, H]`` and ``[E, H, I]``), or
``[in, out]`` ("transposed": ``[E, H, 2I]`` and ``[E, I, H]``, as some exporters and VL-MoE checkpoints
write them). The config's sizes give both shapes of every tensor, and they differ unless two sizes
coincide: ``H == 2I`` for ``gate_up_proj``, ``H == I`` for ``down_proj`` and for every per-expert piece.
Such a tensor has the same shape either way round, and reading it the wrong way loads wrong weights
without an error, so its shape never decides:

- a declared layout decides every tensor, and a tensor without that layout's shape is an error;
- undeclared, the checkpoint's other expert tensors decide. ``H == 2I`` and ``H == I`` exclude each
  other, so of a layer's two fused projections one always shows its layout; the first tensor that shows
  one fixes it for the whole checkpoint, and a later tensor showing the other is an error.

What a converter does with a tensor that ties before anything showed the layout is its own choice (hold
it back, or fall back on what its format defines): :meth:`LayoutEvidence.layout_of` returns None then.
"""

from __future__ import annotations

from collections.abc import Sequence

from modelgraft.models.converters.base import ConversionError

__all__ = ["LAYOUTS", "LayoutEvidence", "swapped"]

#: ``layout`` values: ``nn.Linear``'s ``[out, in]`` (the modeling's), or ``[in, out]``.
LAYOUTS = ("fused", "transposed")


def swapped(shape: Sequence[int]) -> tuple[int, ...]:
    """``shape`` with its last two dims exchanged: the same matrices stored the other way round."""
    return (*shape[:-2], shape[-1], shape[-2])


class LayoutEvidence:
    """The layout of one checkpoint's expert matrices: ``declared``, or learned from the first tensor that shows it."""

    def __init__(self, declared: str | None = None) -> None:
        if declared is not None and declared not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS} or None (undeclared), got {declared!r}")
        self.declared = declared
        self._learned: tuple[str, str] | None = None  # (layout, the key that showed it)

    @property
    def known(self) -> str | None:
        """The layout, once declared or shown by a tensor; None while every tensor seen so far tied."""
        if self.declared is not None:
            return self.declared
        return None if self._learned is None else self._learned[0]

    def layout_of(self, key: str, shape: Sequence[int], fused_shape: Sequence[int]) -> str | None:
        """The layout ``key`` is stored in, given its shape in the fused layout; None: a tie nothing settled yet."""
        shape, fused_shape = tuple(shape), tuple(fused_shape)
        shapes = {"fused": fused_shape, "transposed": swapped(fused_shape)}
        fits = [layout for layout in LAYOUTS if shape == shapes[layout]]
        if self.declared is not None:
            if self.declared in fits:
                return self.declared
            hint = " (the other layout's shape: is the declared layout right?)" if fits else ""
            raise ConversionError(
                f"{key!r} has shape {list(shape)}; the checkpoint is declared {self.declared!r}, "
                f"which stores it as {list(shapes[self.declared])}{hint}"
            )
        if not fits:
            raise ConversionError(
                f"{key!r} has shape {list(shape)}; expected {list(fused_shape)} or transposed {list(swapped(fused_shape))}"
            )
        if len(fits) == 2:
            return self.known
        self._learn(fits[0], key)
        return fits[0]

    def _learn(self, layout: str, key: str) -> None:
        if self._learned is None:
            self._learned = (layout, key)
        elif self._learned[0] != layout:
            shown, by = self._learned
            raise ConversionError(
                f"{key!r} is stored {layout}, but {by!r} was stored {shown}: one checkpoint holds its experts "
                "one way round"
            )
