"""Reusable parity harness for per-model tests: tiny configs, batches, and upstream-vs-generated checks.

The names below resolve on first use (PEP 562), so importing one light module of this package (the
preloaded interpreter a benchmark's parent starts, the seed helper) does not import the harness, and
with it torch and transformers, first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each public name and the module of this package that defines it.
_EXPORTS = {
    "IGNORE_INDEX": "batches",
    "causal_lm_batch": "batches",
    "sequence_classification_batch": "batches",
    "TINY_SIZES": "configs",
    "tiny_config": "configs",
    "EAGER_TOLERANCE": "parity",
    "KERNEL_TOLERANCE": "parity",
    "ModelPair": "parity",
    "StepResult": "parity",
    "Tolerance": "parity",
    "assert_step_parity": "parity",
    "build_pair": "parity",
    "check_parity": "parity",
    "run_step": "parity",
    "registered_model": "registration",
    "seed_everything": "seed",
}

__all__ = [
    "EAGER_TOLERANCE",
    "IGNORE_INDEX",
    "KERNEL_TOLERANCE",
    "TINY_SIZES",
    "ModelPair",
    "StepResult",
    "Tolerance",
    "assert_step_parity",
    "build_pair",
    "causal_lm_batch",
    "check_parity",
    "registered_model",
    "run_step",
    "seed_everything",
    "sequence_classification_batch",
    "tiny_config",
]

if TYPE_CHECKING:
    from modelgraft.models.testing.batches import IGNORE_INDEX, causal_lm_batch, sequence_classification_batch
    from modelgraft.models.testing.configs import TINY_SIZES, tiny_config
    from modelgraft.models.testing.parity import (
        EAGER_TOLERANCE,
        KERNEL_TOLERANCE,
        ModelPair,
        StepResult,
        Tolerance,
        assert_step_parity,
        build_pair,
        check_parity,
        run_step,
    )
    from modelgraft.models.testing.registration import registered_model
    from modelgraft.models.testing.seed import seed_everything


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
