"""Binding an ``OpsConfig`` to the global slots: all-or-nothing, and restorable; or to one model's calls.

Slots are process-global, because generated code reads the slot objects themselves. ``attach_ops``
scopes a binding to a model instead: every call of the model, or of any of its submodules, binds the
model's kernels on entry and restores the bindings it found on exit (also when the call raises), so
models built with different ops run their own kernels in one process, whatever is bound globally.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from modelgraft.models.ops.config import OpsConfig
from modelgraft.models.ops.errors import OpsConfigError
from modelgraft.models.ops.kernels import EAGER, eager, load_kernel
from modelgraft.models.ops.slots import SLOTS, BoundKernel

if TYPE_CHECKING:  # torch stays out of ``import modelgraft.models``
    from torch import nn

__all__ = [
    "ModelOps",
    "attach_ops",
    "bind_ops",
    "bound_ops",
    "current_ops",
    "restore_bindings",
    "unbind_ops",
]


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


def restore_bindings(bindings: Mapping[str, BoundKernel | None]) -> None:
    """Bind each slot as ``bindings`` says (None: unbound): how every scope puts back what it found."""
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
    restore_bindings(_resolve(ops))


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
        restore_bindings(previous)


def _snapshot() -> dict[str, BoundKernel | None]:
    return {name: slot.bound for name, slot in SLOTS.items()}


#: One entry per module call running under a model's ops: the scope, and the bindings to restore on exit
#: (None for a call nested in a call of the same scope, which found its kernels already bound).
_ACTIVE: list[tuple[ModelOps, dict[str, BoundKernel | None] | None]] = []


class ModelOps:
    """An ``OpsConfig`` resolved once (every kernel loaded and checked) and bound around a model's calls.

    Its ``enter``/``exit`` are the forward pre-hook and the always-called forward hook that ``attach_ops``
    registers on every module of the model. Slots stay process-global while a call runs, so two models
    must not run at the same time in two threads.
    """

    def __init__(self, ops: OpsConfig) -> None:
        self.ops = ops
        self._bindings = _resolve(ops)

    def enter(self, module: Any, args: Any) -> None:
        if _ACTIVE and _ACTIVE[-1][0] is self:
            _ACTIVE.append((self, None))  # nested: a submodule called by a module of the same model
            return
        _ACTIVE.append((self, _snapshot()))  # pushed first, so exit restores even if applying fails
        restore_bindings(self._bindings)

    def exit(self, module: Any, args: Any, output: Any) -> None:
        scope, previous = _ACTIVE.pop()
        if scope is not self:  # calls interleaved (threads, generators): nothing sound to restore
            raise RuntimeError(
                "op slot scopes exited out of order: models with their own ops must not run concurrently"
            )
        if previous is not None:
            restore_bindings(previous)

    def __deepcopy__(self, memo: dict[int, Any]) -> ModelOps:
        return self  # immutable once built: a deep copy of the model shares it

    def __repr__(self) -> str:
        return f"ModelOps({dict(self.ops.kernels)})"


def attach_ops(model: nn.Module, ops: OpsConfig) -> nn.Module:
    """Make every call of ``model`` (and of each of its submodules) run under ``ops``; returns ``model``.

    Each call binds ``ops`` on entry and restores the previous bindings on exit, also when the call
    raises; nested calls inside the model rebind nothing. Autograd functions are captured in forward, so
    backward runs what forward ran, and hooking the submodules too covers a decoder layer recomputed in
    backward under gradient checkpointing, or called on its own. ``model.ops_config`` records ``ops``.
    Kernels are loaded and checked here, so one the machine cannot run raises before anything changes.
    A model has one set of ops: attaching to a model that already has them raises ``OpsConfigError``.
    """
    if getattr(model, "ops_config", None) is not None:
        raise OpsConfigError(
            f"{type(model).__name__} already runs under ops {dict(model.ops_config.kernels)}; build a new model"
        )
    scope = ModelOps(ops)
    for module in model.modules():
        module.register_forward_pre_hook(scope.enter, prepend=True)
        module.register_forward_hook(scope.exit, always_call=True)
    model.ops_config = ops
    return model
