"""Kernel families name their modules by import: loaded when bound, and the name reported is the module loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgraft.models.ops import KERNEL_FAMILIES
from modelgraft.models.testing.preloaded_python import run_code

#: Families whose module imports on any machine (no CUDA, no optional package).
LOADABLE = sorted(name for name, family in KERNEL_FAMILIES.items() if family.unavailable_reason() is None)


def test_importing_the_ops_loads_no_distributed_gpu_or_npu_kernel_module() -> None:
    code = (
        "import sys, modelgraft.models.ops\n"
        "print(sorted(m for m in sys.modules if m.startswith('modelgraft.models.distributed')"
        " or m in ('modelgraft.models.ops.kernels.liger', 'modelgraft.models.ops.kernels.npu', 'liger_kernel')))\n"
    )
    done = run_code(code, cwd=Path.cwd())
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


def test_a_lazily_loaded_family_reports_its_module_without_importing_it() -> None:
    code = (
        "import sys\n"
        "from modelgraft.models.ops import KERNEL_FAMILIES\n"
        "print(KERNEL_FAMILIES['ep_alltoall'].module, KERNEL_FAMILIES['liger'].module)\n"
        "print('modelgraft.models.distributed' in sys.modules, 'modelgraft.models.ops.kernels.liger' in sys.modules)\n"
    )
    done = run_code(code, cwd=Path.cwd())
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "modelgraft.models.distributed.expert_parallel",
        "modelgraft.models.ops.kernels.liger",
        "False",
        "False",
    ]


@pytest.mark.parametrize("name", LOADABLE)
def test_the_module_a_family_names_is_the_module_its_loader_loads(name: str) -> None:
    family = KERNEL_FAMILIES[name]
    module = family.load()

    assert module.__name__ == family.module
    assert all(callable(getattr(module, slot)) for slot in family.slots)
