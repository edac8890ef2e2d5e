"""Reusable parity harness for per-model tests: tiny configs, batches, and upstream-vs-generated checks."""

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
