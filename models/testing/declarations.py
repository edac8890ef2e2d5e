"""The model declarations (``DenseModel`` / ``MoeModel``) that each zoo model's tests hold.

A model's parity test module (``models/<m>/tests/test_<m>_parity.py``) declares its tiny sizes, heads and
backends once. The scaffold's smoke check and the zoo-wide suites read the same declarations, so they load
the test files by path: the test folders are not packages (pytest imports them by file name) and are not
installed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from modelgraft.models.testing.dense_suite import DenseModel

MODELS_ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path) -> ModuleType:
    name = f"_model_tests.{path.parents[1].name}.{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def model_declarations(package: str) -> list[DenseModel]:
    """Every declaration in ``models/<package>/tests/test_*.py``, in file order."""
    found: dict[int, DenseModel] = {}
    for path in sorted((MODELS_ROOT / package / "tests").glob("test_*.py")):
        found.update({id(v): v for v in vars(_load(path)).values() if isinstance(v, DenseModel)})
    return list(found.values())


def parity_declaration(package: str) -> DenseModel:
    """The declaration a scaffold's parity test names after its package (``QWEN3`` in ``test_qwen3_parity.py``)."""
    module = _load(MODELS_ROOT / package / "tests" / f"test_{package}_parity.py")
    return getattr(module, package.upper())
