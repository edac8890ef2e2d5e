"""Binding an ``OpsConfig`` to the global slots: all-or-nothing, and restorable; or to one model's calls.

Slots are process-global, because generated code reads the slot objects themselves. ``attach_ops``
scopes a binding to a model instead: every call of the model, or of any of its submodules, binds the
model's kernels on entry and restores the bindings it found on exit (also when the call raises), so
models built with different ops run their own kernels in one process, whatever is bound globally.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from modelgraft.models.ops.config import OpsConfig
from modelgraft.models.ops.errors import OpsConfigError, OpsConflictError
from modelgraft.models.ops.kernels import EAGER, eager, is_distributed, load_kernel
from modelgraft.models.ops.slots import SLOTS, BoundKernel, OpSlot

if TYPE_CHECKING:  # torch stays out of ``import modelgraft.models``
    from torch import nn

__all__ = [
    "ModelOps",
    "attach_ops",
    "bind_ops",
    "bound_ops",
    "consulted_slots",
    "current_bindings",
    "current_ops",
    "refuse_shadowing",
    "refuse_unconsulted",
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
        resolved[slot] = BoundKernel(name=kernel, fn=fn, options=dict(options))
    return resolved


def restore_bindings(bindings: Mapping[str, BoundKernel | None]) -> None:
    """Bind each slot as ``bindings`` says (None: unbound): how every scope puts back what it found."""
    for slot, bound in bindings.items():
        if bound is None:
            SLOTS[slot].unbind()
        else:
            SLOTS[slot].bind(bound.fn, name=bound.name, options=bound.options)


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


def current_bindings() -> dict[str, BoundKernel | None]:
    """Every slot's binding now (None: unbound), for ``restore_bindings`` to put back."""
    return {name: slot.bound for name, slot in SLOTS.items()}


def current_ops() -> dict[str, str]:
    """Slot name -> bound kernel name, for the slots that are bound."""
    return {name: slot.bound.name for name, slot in SLOTS.items() if slot.bound is not None}


@contextmanager
def bound_ops(ops: OpsConfig) -> Iterator[None]:
    """Bind ``ops`` for the duration of a block, then restore exactly the bindings found on entry."""
    previous = current_bindings()
    bind_ops(ops)
    try:
        yield
    finally:
        restore_bindings(previous)


def _shadowed(own: Mapping[str, BoundKernel | None], found: Mapping[str, BoundKernel | None]) -> dict[str, str]:
    """Slot -> the distributed kernel in ``found`` that ``own`` would replace with one of this rank alone."""
    shadowed = {}
    for slot, bound in found.items():
        if bound is None or not is_distributed(bound.name):
            continue
        mine = own.get(slot)
        if mine is None or not is_distributed(mine.name):
            shadowed[slot] = bound.name
    return shadowed


def refuse_shadowing(ops: OpsConfig, owner: str) -> None:
    """Raise ``OpsConflictError`` if running ``owner`` under ``ops`` would replace distributed kernels.

    What is bound process-wide may hold kernels such as ``global_batch`` or ``ep_alltoall``, bound by
    ``bind_ops(parallel_ops(state))``. A model with ops of its own binds them around each of its calls, so
    it would run its local kernel instead, on every call and without a word: each rank's loss instead of
    the global batch's, this rank's experts only. The message names both sides and how to compose them.
    """
    _refuse_shadowing(ops, _resolve(ops), current_bindings(), owner)


def _refuse_shadowing(
    ops: OpsConfig, own: Mapping[str, BoundKernel | None], found: Mapping[str, BoundKernel | None], owner: str
) -> None:
    shadowed = _shadowed(own, found)
    if not shadowed:
        return
    local = ", ".join(f"{slot}={ops.kernel_for(slot)}" for slot in sorted(shadowed))
    parallel = ", ".join(f"{slot}={kernel}" for slot, kernel in sorted(shadowed.items()))
    raise OpsConflictError(
        f"{owner} runs its own ops ({local}), and the process has distributed kernels bound ({parallel}, "
        "by bind_ops(parallel_ops(state))): the model's ops would replace them on every call, so each rank "
        "would compute on its own share alone. Compose them instead: build the model without ops= and bind "
        "parallel_ops(state, base=<its ops>), or give the model its parallel kernels with "
        "attach_parallel(model, state, base=<its ops>)"
    )


def consulted_slots(model: nn.Module) -> frozenset[str]:
    """The op slots the code of ``model``'s modules can reach, read from that code.

    Generated modules import the slot objects they guard with (``from modelgraft.models.ops.slots import
    rms_norm_slot``) and name them in the methods and helper functions that consult them. The reading starts at
    the methods of each module class the model holds (and their bases in the same modules), follows the functions
    of those modules that they name, and keeps the slot objects named on the way. A slot a module imports only for
    classes this model does not build is not consulted: a composed VLM built on Qwen3.5's text model never runs
    that package's vision RoPE, although the module that holds both imports it.
    """
    classes = {type(module) for module in model.modules()}
    modules = {cls.__module__ for cls in classes}
    pending = [
        function
        for cls in classes
        for base in cls.__mro__
        if base.__module__ in modules
        for function in _functions_of(vars(base).values())
    ]
    seen: set[int] = set()
    found: set[str] = set()
    while pending:
        function = pending.pop()
        if id(function) in seen:
            continue
        seen.add(id(function))
        # What a function captured: a decorator's wrapped function, the helper a kernel hub's module calls.
        pending.extend(_functions_of(cell.cell_contents for cell in function.__closure__ or () if _filled(cell)))
        if function.__module__ not in modules:
            continue
        names = function.__globals__
        for name in _names_in(function.__code__):
            value = names.get(name)
            if isinstance(value, OpSlot):
                if value.name in SLOTS:
                    found.add(value.name)
                continue
            if isinstance(value, type) and value.__module__ in modules and not _is_module_class(value):
                pending.extend(_functions_of(vars(value).values()))
                continue
            candidates = (
                value.values()
                if isinstance(value, Mapping)
                else (value if isinstance(value, (list, tuple)) else (value,))
            )
            pending.extend(_functions_of(candidates))
    return frozenset(found)


def _functions_of(values: Iterable[Any]) -> Iterator[types.FunctionType]:
    """The plain functions behind ``values``: methods, static and class methods, properties' accessors,
    ``functools.partial`` objects, each unwrapped from its decorators (``@can_return_tuple``)."""
    for value in values:
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            yield from _functions_of(accessor for accessor in (value.fget, value.fset) if accessor is not None)
            continue
        elif isinstance(value, functools.partial):
            value = value.func
        if callable(value) and not isinstance(value, type):
            value = inspect.unwrap(value)
            if isinstance(value, types.FunctionType):
                yield value
            else:  # a callable object (transformers' kernel hub wraps a helper in a module): its class's methods
                yield from (method for method in vars(type(value)).values() if isinstance(method, types.FunctionType))


def _filled(cell: types.CellType) -> bool:
    """Whether a closure cell holds a value (reading an empty one raises)."""
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _names_in(code: types.CodeType) -> Iterator[str]:
    """The global and attribute names ``code`` and the functions nested in it load."""
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _names_in(constant)


def _is_module_class(cls: type) -> bool:
    """Whether ``cls`` is a ``torch.nn.Module`` class: those a model runs are among its modules already."""
    return any(base.__name__ == "Module" and base.__module__ == "torch.nn.modules.module" for base in cls.__mro__)


def refuse_unconsulted(model: nn.Module, ops: OpsConfig) -> None:
    """Raise ``OpsConfigError`` for a kernel ``ops`` names on a slot ``model``'s code never consults.

    Such a kernel would never run (the experts kernel on a dense model), so the binding the user asked for
    would silently do nothing.
    """
    consulted = consulted_slots(model)
    unused = sorted(slot for slot, kernel in ops.kernels.items() if kernel != EAGER and slot not in consulted)
    if unused:
        listed = ", ".join(f"{slot}={ops.kernel_for(slot)}" for slot in unused)
        raise OpsConfigError(
            f"{type(model).__name__} has no structure that consults op slot(s) {listed}: no code of it reads "
            f"{'that slot' if len(unused) == 1 else 'those slots'}, so the kernel would never run. The slots it "
            f"consults: {', '.join(sorted(consulted)) or 'none'}"
        )


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
        found = current_bindings()
        outermost = not _ACTIVE
        _ACTIVE.append((self, found))  # pushed first, so exit restores even if applying (or refusing) fails
        if outermost:  # what it found is the process-wide binding, not another model's scope
            _refuse_shadowing(self.ops, self._bindings, found, type(module).__name__)
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
