"""Reference kernels: for every op slot, a kernel that recomputes upstream's eager formula from its arguments.

A reference kernel is bound to one slot at a time in each model's suite (``dense_suite``): the model
then computes that slot's operation from exactly what the generated guard hands the slot, so a guard
that passes a wrong or dropped argument (eps, offset, activation, mask, labels, logits, gate and up
swapped) no longer matches upstream. The reference of slot ``s`` is ``modelgraft.models.ops.kernels.eager.s``,
the semantic spec every other kernel of the slot is tested against; a slot added without one fails
``tests/runtime/test_reference_kernels.py`` and every suite that reaches it.

Which slots a head consults: everything its model guards, except the other head's loss. The causal LM
never calls ``sequence_classification_loss``; the classifier never calls ``causal_lm_loss`` nor
``load_balancing_loss`` (upstream's generic classification head computes no aux loss). A slot added
later is taken to be consulted by both heads until listed here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from modelgraft.models.ops import SLOTS
from modelgraft.models.ops.binding import consulted_slots as slots_in_code
from modelgraft.models.ops.kernels import eager

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "DECODE_SLOTS",
    "HEADS",
    "NOT_CONSULTED",
    "Head",
    "consulted_slots",
    "reference_kernel",
    "reference_kernels",
    "training_step_slots",
]

Head = Literal["causal_lm", "sequence_classification"]
HEADS: tuple[Head, ...] = ("causal_lm", "sequence_classification")

#: The guarded slots a head never calls.
NOT_CONSULTED: Mapping[Head, frozenset[str]] = MappingProxyType(
    {
        "causal_lm": frozenset({"sequence_classification_loss"}),
        "sequence_classification": frozenset({"causal_lm_loss", "load_balancing_loss"}),
    }
)

#: The slots only a cached one-token decode step calls (a Gated DeltaNet mixer's), never a training step.
DECODE_SLOTS = ("causal_conv1d_update", "recurrent_gated_delta_rule")


def reference_kernel(slot: str) -> Callable[..., Any]:
    """The reference kernel of ``slot``; LookupError naming what to add when the slot has none."""
    if slot not in SLOTS:
        raise LookupError(f"no op slot named {slot!r} (slots: {', '.join(SLOTS)})")
    kernel = getattr(eager, slot, None)
    if kernel is None:
        raise LookupError(
            f"op slot {slot!r} has no reference kernel: add models.ops.kernels.eager.{slot}, recomputing "
            "upstream's eager formula from the slot's arguments"
        )
    return kernel


def reference_kernels(slots: Iterable[str]) -> dict[str, Callable[..., Any]]:
    """Slot name -> reference kernel, for ``slots``."""
    return {slot: reference_kernel(slot) for slot in slots}


def consulted_slots(guarded: Iterable[str], head: Head) -> tuple[str, ...]:
    """The slots of ``guarded`` that a training step of ``head`` calls, in slot definition order."""
    chosen = set(guarded) - NOT_CONSULTED[head]
    return tuple(slot for slot in SLOTS if slot in chosen)


def training_step_slots(model: nn.Module) -> frozenset[str]:
    """The slots a causal-LM training step of ``model`` calls: those the code of its modules consults, less the
    classifier's loss and the decode-only slots (:data:`DECODE_SLOTS`)."""
    return slots_in_code(model) - NOT_CONSULTED["causal_lm"] - frozenset(DECODE_SLOTS)
