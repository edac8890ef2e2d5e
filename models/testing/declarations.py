"""The model declarations (``DenseModel`` / ``MoeModel``) that each zoo model's tests hold.

A model's parity test module (``models/<m>/tests/test_<m>_parity.py``) declares its tiny sizes, heads and
backends once. The scaffold's smoke check and the zoo-wide suites read the same declarations, so they load
the test files by path: the test folders are not packages (pytest imports them by file name) and are not
installed. The smoke check also asks the model's suite which slots its causal LM calls and with which
batch, so it binds exactly what the suite's own reference-kernel test binds.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from transformers import PreTrainedConfig

from modelgraft.models.testing.dense_suite import DenseModel, DenseParitySuite

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


def _parity_module(package: str, root: Path) -> ModuleType:
    return _load(root / package / "tests" / f"test_{package}_parity.py")


def parity_declaration(package: str, *, root: Path = MODELS_ROOT) -> DenseModel:
    """The declaration a scaffold's parity test names after its package (``QWEN3`` in ``test_qwen3_parity.py``).

    ``root`` is the folder holding the model packages (``models/``).
    """
    return getattr(_parity_module(package, root), package.upper())


def parity_suite(package: str, *, root: Path = MODELS_ROOT) -> DenseParitySuite:
    """An instance of the suite class (``Test<Prefix>Parity``) that carries the package's declaration."""
    module = _parity_module(package, root)
    declaration = getattr(module, package.upper())
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and issubclass(value, DenseParitySuite)
            and value.__dict__.get("model") is declaration
        ):
            return value()
    raise LookupError(f"{module.__file__} has no parity suite class whose model is {package.upper()}")


def parity_suite_class(package: str, *, root: Path = MODELS_ROOT) -> type:
    """The test class (``Test<Prefix>Parity``) that carries the package's declaration, whichever suite it subclasses
    (dense, MoE, VLM, Omni, ...)."""
    module = _parity_module(package, root)
    declaration = getattr(module, package.upper())
    for value in vars(module).values():
        if isinstance(value, type) and value.__dict__.get("model") is declaration:
            return value
    raise LookupError(f"{module.__file__} has no test class whose model is {package.upper()}")


@dataclass(frozen=True)
class SlotRun:
    """One training step of a head with reference kernels: the architecture, its batch, the slots it calls."""

    architecture: str
    batch: dict[str, Any]
    slots: tuple[str, ...]


def causal_lm_slot_run(suite: DenseParitySuite, config: PreTrainedConfig) -> SlotRun:
    """What the suite's reference-kernel test of the causal LM binds and feeds (MoE: router logits included).

    The guarded slots a training step of the causal LM reaches, and the batch that reaches them, as
    ``test_reference_kernels_in_every_slot_match_upstream`` takes them.
    """
    architecture, batch = suite._head("causal_lm", config)
    return SlotRun(architecture, batch, suite._reachable("causal_lm"))


@dataclass(frozen=True)
class MultimodalRun:
    """A training step of a package's multimodal head (a VLM, an Omni thinker) as its tests declare it: the
    model type, the head's class name, the tiny config, and how to make a batch with its processor (labels
    included; made when asked, since building the processor takes a while)."""

    model_type: str
    architecture: str
    config: PreTrainedConfig
    make_batch: Callable[[], dict[str, Any]]


def multimodal_run(package: str, *, root: Path = MODELS_ROOT) -> MultimodalRun | None:
    """The first multimodal declaration in ``models/<package>/tests/test_*.py`` (file order), or None where the
    tests declare none (a text model, a vision encoder).

    Two shapes of declaration: the VLM and Omni ones give their batch with ``multimodal_batch()`` (images, and
    video and audio where the model takes them); the composed VLMs' with ``batch(config, images_per_row)``, here
    one image in each of two rows.
    """
    for path in sorted((root / package / "tests").glob("test_*.py")):
        for value in vars(_load(path)).values():
            if isinstance(value, type) or not callable(getattr(value, "config", None)):
                continue
            architecture = getattr(value, "causal_lm", None) or getattr(value, "architecture", None)
            if callable(getattr(value, "multimodal_batch", None)):
                return MultimodalRun(value.model_type, architecture, value.config(), value.multimodal_batch)
            if callable(getattr(value, "batch", None)) and architecture:
                config = value.config()
                return MultimodalRun(value.model_type, architecture, config, partial(value.batch, config, (1, 1)))
    return None
