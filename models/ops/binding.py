"""Binding an ``OpsConfig`` to the global slots: all-or-nothing, and restorable."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from models.ops.config import OpsConfig
from models.ops.errors import OpsConfigError
from models.ops.kernels import EAGER, eager, load_kernel
from models.ops.slots import SLOTS, BoundKernel

__all__ = ["bind_ops", "bound_ops", "current_ops", "unbind_ops"]


def _check_options(slot: str, kernel: str, fn: Callable[..., Any], options: Mapping[str, Any]) -> None:
    """Options must be keyword-only parameters of the kernel that are not part of the slot's contract."""
    contract = set(inspect.signature(getattr(eager, slot)).parameters)
    accepted = {
        name
        for name, param in inspect.signature(fn).parameters.items()
        if param.kind is param.KEYWORD_ONLY and name not in contract
    }
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise OpsConfigError(
            f"kernel {kernel!r} of op slot {slot!r} takes no option(s) {unknown} "
            f"(its options: {', '.join(sorted(accepted)) or 'none'})"
        )


def _resolve(ops: OpsConfig) -> dict[str, BoundKernel | None]:
    resolved: dict[str, BoundKernel | None] = {}
    for slot in SLOTS:
        kernel = ops.kernel_for(slot)
        if kernel == EAGER:
            resolved[slot] = None
            continue
        fn = load_kernel(slot, kernel)
        options = ops.options_for(slot)
        if options:
            _check_options(slot, kernel, fn, options)
            fn = functools.partial(fn, **options)
        resolved[slot] = BoundKernel(name=kernel, fn=fn)
    return resolved


def _apply(bindings: Mapping[str, BoundKernel | None]) -> None:
    for slot, bound in bindings.items():
        if bound is None:
            SLOTS[slot].unbind()
        else:
            SLOTS[slot].bind(bound.fn, name=bound.name)


def bind_ops(ops: OpsConfig) -> None:
    """Bind every slot as ``ops`` says (slots it leaves out become eager).

    Every kernel is loaded and checked before any slot changes, so a kernel that cannot run here
    (``KernelUnavailableError``) leaves the previous binding intact. Slots are process-global: the
    binding applies to every generated model in the process.
    """
    _apply(_resolve(ops))


def unbind_ops() -> None:
    """Return every slot to eager (upstream code)."""
    for slot in SLOTS.values():
        slot.unbind()


def current_ops() -> dict[str, str]:
    """Slot name -> bound kernel name, for the slots that are bound."""
    return {name: slot.bound.name for name, slot in SLOTS.items() if slot.bound is not None}


@contextmanager
def bound_ops(ops: OpsConfig) -> Iterator[None]:
    """Bind ``ops`` for the duration of a block, then restore exactly the bindings found on entry."""
    previous = {name: slot.bound for name, slot in SLOTS.items()}
    bind_ops(ops)
    try:
        yield
    finally:
        _apply(previous)
