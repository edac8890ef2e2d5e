"""Which kernels exist for which slot, what each needs to run, and how one is loaded.

A kernel family is one module defining a function per slot it serves, named after the slot
(``modelgraft.models.ops.kernels.liger.rms_norm`` serves ``rms_norm``). Each family's module is an
import of this file: the pure-torch families at the top, the others inside their loader, run only when
one of their kernels is bound, after their requirements are checked (each loader says why it waits; the
pure-torch ``grouped`` and ``grouped_compiled`` wait too, because importing them registers torch operators).
"eager" is not a family: binding it leaves the slot unbound and upstream code runs.
"""

from __future__ import annotations

import dis
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any

from modelgraft.models.ops.errors import KernelUnavailableError, OpsConfigError
from modelgraft.models.ops.kernels import chunked_loss, delta_rule, indexers

__all__ = [
    "EAGER",
    "KERNEL_FAMILIES",
    "KernelFamily",
    "cpp_compiler_missing",
    "is_distributed",
    "kernel_names",
    "load_kernel",
]

EAGER = "eager"


@dataclass(frozen=True)
class KernelFamily:
    """A set of kernels living in one module, with the machine they need."""

    name: str
    #: Returns the family's module: a module imported above, or one this loader imports when called.
    load: Callable[[], ModuleType]
    slots: frozenset[str]
    requires_cuda: bool = False
    requires_packages: tuple[str, ...] = ()
    #: Its kernels compile code with ``torch.compile`` (inductor), which builds C++ on a CPU: a C++ compiler
    #: must be found where inductor looks for one (``$CXX``, else ``g++``).
    requires_cpp_compiler: bool = False
    #: Its kernels run collectives over process groups bound as options (``parallel_ops``): a model that
    #: runs another kernel on such a slot computes on this rank's share alone.
    distributed: bool = False

    @property
    def module(self) -> str:
        """The family's dotted module name, without importing a lazily loaded one (read from its loader's import)."""
        imported = [i.argval for i in dis.get_instructions(self.load) if i.opname in ("IMPORT_NAME", "IMPORT_FROM")]
        return ".".join(imported) if imported else self.load().__name__

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
        if self.requires_cpp_compiler:
            reason = cpp_compiler_missing()
            if reason is not None:
                reasons.append(reason)
        return "; ".join(reasons) or None


def cpp_compiler_missing() -> str | None:
    """Why inductor cannot compile for a CPU here (no C++ compiler where it looks), or None if it can.

    Asks inductor itself (``torch._inductor.cpp_builder.get_cpp_compiler``, which runs ``<compiler> --version``
    once per process and setting), so the answer follows ``torch._inductor.config.cpp.cxx`` and ``$CXX`` as
    inductor does.
    """
    from torch._inductor import config, cpp_builder, exc

    try:
        cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        searched = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
        names = " or ".join(str(name) for name in searched if name)
        return (
            "compiles with torch.compile, whose inductor backend builds C++ on a CPU, and no C++ compiler was found "
            f"(inductor looked for {names or 'none'}; install one or point $CXX at it)"
        )
    return None


def _ep_alltoall() -> ModuleType:
    # Imported when bound: modelgraft.models.distributed imports modelgraft.models.ops (OpsConfig), so a
    # module-level import here would be circular; and only distributed runs need torch.distributed.
    from modelgraft.models.distributed import expert_parallel

    return expert_parallel


def _global_batch() -> ModuleType:
    # Imported when bound, as _ep_alltoall.
    from modelgraft.models.distributed import losses

    return losses


def _sp_gather() -> ModuleType:
    # Imported when bound, as _ep_alltoall.
    from modelgraft.models.distributed import sparse_indexer

    return sparse_indexer


def _sp_linear() -> ModuleType:
    # Imported when bound, as _ep_alltoall.
    from modelgraft.models.distributed import linear_attention

    return linear_attention


def _sp_placeholders() -> ModuleType:
    # Imported when bound, as _ep_alltoall.
    from modelgraft.models.distributed import multimodal

    return multimodal


def _grouped() -> ModuleType:
    # Imported when bound: it defines torch custom operators (torch.ops.modelgraft.grouped_experts_fwd and _bwd,
    # what makes it traceable by torch.compile), and importing a generated module registers nothing.
    from modelgraft.models.ops.kernels import grouped_experts

    return grouped_experts


def _compiled() -> ModuleType:
    # Imported when bound, after the C++ compiler check: inductor's import is not free.
    from modelgraft.models.ops.kernels import compiled_references

    return compiled_references


def _grouped_compiled() -> ModuleType:
    # Imported when bound, after the C++ compiler check: it defines torch custom operators, as _grouped's does.
    from modelgraft.models.ops.kernels import compiled_experts

    return compiled_experts


def _liger() -> ModuleType:
    # Imported when bound, after the CUDA and package checks: liger_kernel is an optional GPU-only package.
    from modelgraft.models.ops.kernels import liger

    return liger


def _npu() -> ModuleType:
    # Imported when bound, after the package check: torch_npu is an optional package of Ascend machines.
    from modelgraft.models.ops.kernels import npu

    return npu


def _fla() -> ModuleType:
    # Imported when bound, after the CUDA and package checks: fla (flash-linear-attention) is GPU-only.
    from modelgraft.models.ops.kernels import fla_delta

    return fla_delta


def _causal_conv1d() -> ModuleType:
    # Imported when bound, after the CUDA and package checks: causal_conv1d is a CUDA extension.
    from modelgraft.models.ops.kernels import causal_conv

    return causal_conv


KERNEL_FAMILIES: Mapping[str, KernelFamily] = MappingProxyType(
    {
        "chunked": KernelFamily(
            name="chunked",
            load=lambda: chunked_loss,
            slots=frozenset({"causal_lm_loss"}),
        ),
        "compiled": KernelFamily(
            name="compiled",
            load=_compiled,
            slots=frozenset({"rms_norm", "rope", "glu_activation", "gated_mlp"}),
            requires_cpp_compiler=True,
        ),
        "grouped": KernelFamily(
            name="grouped",
            load=_grouped,
            slots=frozenset({"moe_experts"}),
        ),
        "grouped_compiled": KernelFamily(
            name="grouped_compiled",
            load=_grouped_compiled,
            slots=frozenset({"moe_experts"}),
            requires_cpp_compiler=True,
        ),
        "shared_keys": KernelFamily(
            name="shared_keys",
            load=lambda: indexers,
            slots=frozenset({"dsa_indexer", "lightning_indexer"}),
        ),
        "chunked_delta": KernelFamily(
            name="chunked_delta",
            load=lambda: delta_rule,
            slots=frozenset({"chunk_gated_delta_rule", "causal_conv1d"}),
        ),
        "ep_alltoall": KernelFamily(
            name="ep_alltoall",
            load=_ep_alltoall,
            slots=frozenset({"moe_experts"}),
            distributed=True,
        ),
        "global_batch": KernelFamily(
            name="global_batch",
            load=_global_batch,
            slots=frozenset({"causal_lm_loss", "load_balancing_loss"}),
            distributed=True,
        ),
        "sp_gather": KernelFamily(
            name="sp_gather",
            load=_sp_gather,
            slots=frozenset({"dsa_indexer"}),
            distributed=True,
        ),
        "sp_linear": KernelFamily(
            name="sp_linear",
            load=_sp_linear,
            slots=frozenset({"causal_conv1d", "chunk_gated_delta_rule"}),
            distributed=True,
        ),
        "sp_placeholders": KernelFamily(
            name="sp_placeholders",
            load=_sp_placeholders,
            slots=frozenset({"placeholder_features"}),
            distributed=True,
        ),
        "liger": KernelFamily(
            name="liger",
            load=_liger,
            slots=frozenset({"rms_norm", "glu_activation", "gated_mlp", "rope", "causal_lm_loss"}),
            requires_cuda=True,
            requires_packages=("liger_kernel",),
        ),
        "npu": KernelFamily(
            name="npu",
            load=_npu,
            slots=frozenset({"rms_norm", "glu_activation", "gated_mlp", "rope"}),
            requires_packages=("torch_npu",),
        ),
        "fla": KernelFamily(
            name="fla",
            load=_fla,
            slots=frozenset({"chunk_gated_delta_rule", "recurrent_gated_delta_rule"}),
            requires_cuda=True,
            requires_packages=("fla",),
        ),
        "causal_conv1d": KernelFamily(
            name="causal_conv1d",
            load=_causal_conv1d,
            slots=frozenset({"causal_conv1d", "causal_conv1d_update"}),
            requires_cuda=True,
            requires_packages=("causal_conv1d",),
        ),
    }
)


def kernel_names(slot: str) -> tuple[str, ...]:
    """Every kernel name valid for ``slot``, ``"eager"`` first."""
    return (EAGER, *sorted(name for name, family in KERNEL_FAMILIES.items() if slot in family.slots))


def is_distributed(kernel: str) -> bool:
    """Whether ``kernel`` (a family name, or ``"eager"``) runs collectives over the process's groups."""
    family = KERNEL_FAMILIES.get(kernel)
    return family is not None and family.distributed


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
        module = family.load()
    except ImportError as exc:
        raise KernelUnavailableError(slot, kernel, f"importing {family.module} failed: {exc}") from exc
    return getattr(module, slot)
