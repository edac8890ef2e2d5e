"""``OpsConfig``: which kernel each slot runs, validated when it is built so a typo fails early."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from modelgraft.models.ops.errors import OpsConfigError
from modelgraft.models.ops.kernels import EAGER, KERNEL_FAMILIES, kernel_names
from modelgraft.models.ops.slots import SLOTS

__all__ = ["OpsConfig"]


def _check_slot(slot: str) -> None:
    if slot not in SLOTS:
        raise OpsConfigError(f"unknown op slot {slot!r} (valid: {', '.join(SLOTS)})")


@dataclass(frozen=True)
class OpsConfig:
    """Slot name -> kernel name; slots left out run eager (upstream code).

    ``kernel_options`` passes keyword arguments to a slot's kernel at every call, e.g.
    ``OpsConfig({"causal_lm_loss": "chunked"}, kernel_options={"causal_lm_loss": {"chunk_size": 1024}})``.
    Only the bound kernel's own keyword-only parameters are accepted, checked when the config is bound.
    """

    kernels: Mapping[str, str] = field(default_factory=dict)
    kernel_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for slot, kernel in self.kernels.items():
            _check_slot(slot)
            if kernel not in kernel_names(slot):
                raise OpsConfigError(
                    f"unknown kernel {kernel!r} for op slot {slot!r} (valid: {', '.join(kernel_names(slot))})"
                )
        for slot in self.kernel_options:
            _check_slot(slot)
            if self.kernel_for(slot) == EAGER:
                raise OpsConfigError(f"kernel_options given for op slot {slot!r}, which runs eager")
        object.__setattr__(self, "kernels", MappingProxyType(dict(self.kernels)))
        object.__setattr__(
            self,
            "kernel_options",
            MappingProxyType({slot: MappingProxyType(dict(opts)) for slot, opts in self.kernel_options.items()}),
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Read-only mappings do not pickle: rebuild from plain dicts (deepcopy and pickling of a model
        # that carries its ops, e.g. an EMA copy, go through here).
        options = {slot: dict(opts) for slot, opts in self.kernel_options.items()}
        return (type(self), (dict(self.kernels), options))

    def __deepcopy__(self, memo: dict[int, Any]) -> OpsConfig:
        return self  # frozen: a copy would be equal in every way

    @classmethod
    def everywhere(cls, kernel: str) -> OpsConfig:
        """``kernel`` on every slot that has it, eager elsewhere (e.g. ``OpsConfig.everywhere("liger")``)."""
        if kernel != EAGER and kernel not in KERNEL_FAMILIES:
            raise OpsConfigError(f"unknown kernel {kernel!r} (valid: {', '.join((EAGER, *KERNEL_FAMILIES))})")
        return cls({slot: kernel for slot in SLOTS if kernel in kernel_names(slot)})

    def kernel_for(self, slot: str) -> str:
        """The kernel name ``slot`` runs under this config."""
        _check_slot(slot)
        return self.kernels.get(slot, EAGER)

    def options_for(self, slot: str) -> Mapping[str, Any]:
        """Keyword arguments bound into ``slot``'s kernel."""
        _check_slot(slot)
        return self.kernel_options.get(slot, MappingProxyType({}))

    @property
    def is_eager(self) -> bool:
        """True when every slot runs the upstream code."""
        return all(kernel == EAGER for kernel in self.kernels.values())
