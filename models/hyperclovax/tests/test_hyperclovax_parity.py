"""HyperCLOVAX: the generated modeling matches upstream transformers (the dense suite).

The tiny config is derived from HyperCLOVAXConfig itself (modelgraft.models.testing.tiny), so its sizes satisfy the
model's own constraints; the suite checks only the slots this scaffold guards.
"""

from transformers import HyperCLOVAXConfig

from modelgraft.models.testing.dense_suite import DenseModel, DenseParitySuite

HYPERCLOVAX = DenseModel(
    model_type="hyperclovax",
    config_class=HyperCLOVAXConfig,
    causal_lm="HyperCLOVAXForCausalLM",
    sequence_classification=None,
    guarded=("rms_norm", "glu_activation", "rope", "causal_lm_loss"),
    derived_sizes=True,
)


class TestHyperCLOVAXParity(DenseParitySuite):
    model = HYPERCLOVAX
