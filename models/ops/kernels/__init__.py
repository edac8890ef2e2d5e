"""Which kernels exist for which slot, what each needs to run, and how one is loaded.

A kernel family is one module defining a function per slot it serves, named after the slot
(``modelgraft.models.ops.kernels.liger.rms_norm`` serves ``rms_norm``). A family's module is imported only when
one of its kernels is bound, after its requirements are checked, so GPU-only dependencies stay out of
CPU processes. "eager" is not a family: binding it leaves the slot unbound and upstream code runs.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from modelgraft.models.ops.errors import KernelUnavailableError, OpsConfigError

__all__ = ["EAGER", "KERNEL_FAMILIES", "KernelFamily", "kernel_names", "load_kernel"]

EAGER = "eager"


@dataclass(frozen=True)
class KernelFamily:
    """A set of kernels living in one module, with the machine they need."""

    name: str
    module: str
    slots: frozenset[str]
    requires_cuda: bool = False
    requires_packages: tuple[str, ...] = ()

    def unavailable_reason(self) -> str | None:
        """Why this family cannot run here, or None if it can (checked without importing the family)."""
        reasons = []
        if self.requires_cuda:
            import torch

            if not torch.cuda.is_available():
                reasons.append("needs a CUDA device, and torch.cuda.is_available() is False on this machine")
        missing = [package for package in self.requires_packages if importlib.util.find_spec(package) is None]
        if missing:
            reasons.append(f"needs package(s) that are not installed: {', '.join(missing)}")
        return "; ".join(reasons) or None


KERNEL_FAMILIES: Mapping[str, KernelFamily] = MappingProxyType(
    {
        "chunked": KernelFamily(
            name="chunked",
            module="modelgraft.models.ops.kernels.chunked_loss",
            slots=frozenset({"causal_lm_loss"}),
        ),
        "grouped": KernelFamily(
            name="grouped",
            module="modelgraft.models.ops.kernels.grouped_experts",
            slots=frozenset({"moe_experts"}),
        ),
        "shared_keys": KernelFamily(
            name="shared_keys",
            module="modelgraft.models.ops.kernels.indexers",
            slots=frozenset({"dsa_indexer", "lightning_indexer"}),
        ),
        "ep_alltoall": KernelFamily(
            name="ep_alltoall",
            module="modelgraft.models.distributed.expert_parallel",
            slots=frozenset({"moe_experts"}),
        ),
        "global_batch": KernelFamily(
            name="global_batch",
            module="modelgraft.models.distributed.losses",
            slots=frozenset({"causal_lm_loss", "load_balancing_loss"}),
        ),
        "sp_gather": KernelFamily(
            name="sp_gather",
            module="modelgraft.models.distributed.sparse_indexer",
            slots=frozenset({"dsa_indexer"}),
        ),
        "liger": KernelFamily(
            name="liger",
            module="modelgraft.models.ops.kernels.liger",
            slots=frozenset({"rms_norm", "glu_activation", "gated_mlp", "rope", "causal_lm_loss"}),
            requires_cuda=True,
            requires_packages=("liger_kernel",),
        ),
        "npu": KernelFamily(
            name="npu",
            module="modelgraft.models.ops.kernels.npu",
            slots=frozenset({"rms_norm", "glu_activation", "gated_mlp", "rope"}),
            requires_packages=("torch_npu",),
        ),
    }
)


def kernel_names(slot: str) -> tuple[str, ...]:
    """Every kernel name valid for ``slot``, ``"eager"`` first."""
    return (EAGER, *sorted(name for name, family in KERNEL_FAMILIES.items() if slot in family.slots))


def load_kernel(slot: str, kernel: str) -> Callable[..., Any]:
    """Import and return the function of ``kernel`` for ``slot``; raises if it cannot run on this machine."""
    family = KERNEL_FAMILIES.get(kernel)
    if family is None or slot not in family.slots:
        raise OpsConfigError(
            f"slot {slot!r} has no non-eager kernel {kernel!r} (valid: {', '.join(kernel_names(slot))})"
        )
    reason = family.unavailable_reason()
    if reason is not None:
        raise KernelUnavailableError(slot, kernel, reason)
    try:
        module = importlib.import_module(family.module)
    except ImportError as exc:
        raise KernelUnavailableError(slot, kernel, f"importing {family.module} failed: {exc}") from exc
    return getattr(module, slot)
