"""Op slots: unbound means eager, binding routes calls, and the names generated code relies on exist."""

from __future__ import annotations

import pytest

import models.ops
from models.ops import SLOTS, OpSlot, UnboundSlotError, rms_norm_slot

#: The slot instances generated modeling files import by these exact names.
GENERATED_CODE_SLOT_NAMES = {
    "activation_slot": "activation",
    "layer_norm_slot": "layer_norm",
    "rms_norm_slot": "rms_norm",
    "glu_activation_slot": "glu_activation",
    "rope_slot": "rope",
    "causal_lm_loss_slot": "causal_lm_loss",
    "sequence_classification_loss_slot": "sequence_classification_loss",
    "moe_experts_slot": "moe_experts",
    "load_balancing_loss_slot": "load_balancing_loss",
}


def test_generated_code_slot_names_are_exported() -> None:
    for attribute, slot_name in GENERATED_CODE_SLOT_NAMES.items():
        slot = getattr(models.ops, attribute)
        assert isinstance(slot, OpSlot)
        assert slot.name == slot_name
        assert SLOTS[slot_name] is slot
    assert set(SLOTS) == set(GENERATED_CODE_SLOT_NAMES.values())


def test_slots_start_unbound() -> None:
    for slot in SLOTS.values():
        assert slot.use_non_eager_impl is False
        assert slot.bound_kernel_name is None
        assert slot.bound is None


def test_calling_an_unbound_slot_raises() -> None:
    with pytest.raises(UnboundSlotError, match="use_non_eager_impl"):
        rms_norm_slot(1, 2, 3)


def test_bind_routes_calls_to_the_kernel() -> None:
    slot = OpSlot("test")
    slot.bind(lambda x, *, scale: x * scale, name="times")
    assert slot.use_non_eager_impl is True
    assert slot.bound_kernel_name == "times"
    assert slot(3, scale=2) == 6


def test_bind_defaults_the_name_to_the_qualified_kernel_name() -> None:
    slot = OpSlot("test")
    slot.bind(max)
    assert slot.bound_kernel_name == "builtins.max"


def test_unbind_returns_to_eager() -> None:
    slot = OpSlot("test")
    slot.bind(abs)
    slot.unbind()
    assert slot.use_non_eager_impl is False
    with pytest.raises(UnboundSlotError):
        slot(-1)


def test_bind_rejects_a_non_callable() -> None:
    with pytest.raises(TypeError, match="callable"):
        OpSlot("test").bind("not a kernel")  # type: ignore[arg-type]
