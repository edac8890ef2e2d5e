"""The failures of op-slot binding, one type per cause so callers and tests can tell them apart."""

from __future__ import annotations


class OpsError(Exception):
    """Base of every op-slot error."""


class OpsConfigError(OpsError, ValueError):
    """An ops config names a slot or kernel that does not exist, or options a kernel does not take."""


class OpsConflictError(OpsConfigError):
    """A model's own ops would replace distributed kernels bound for the whole process on every call."""


class KernelUnavailableError(OpsError, RuntimeError):
    """A kernel exists but cannot run on this machine (no CUDA device, package not installed)."""

    def __init__(self, slot: str, kernel: str, cause: str) -> None:
        super().__init__(f"cannot bind kernel {kernel!r} to slot {slot!r}: {cause}")
        self.slot = slot
        self.kernel = kernel
        self.cause = cause


class FormulationRefusedError(OpsError, ValueError):
    """A bound kernel cannot compute what a model asks of its slot: a formulation its operator lacks (torch_npu's
    RMSNorm needs a weight, its SwiGLU is SiLU only). Raised when the slot is called; bind another kernel to
    ``slot`` (``'eager'`` computes every formulation) for that model."""

    def __init__(self, slot: str, kernel: str, cause: str) -> None:
        super().__init__(f"{kernel} {slot} {cause}; bind the 'eager' kernel to the {slot} slot for this model")
        self.slot = slot
        self.kernel = kernel
        self.cause = cause


class UnboundSlotError(OpsError, RuntimeError):
    """A slot was called with no kernel bound; generated code checks ``use_non_eager_impl`` first."""
