"""Mistral: the generated modeling matches upstream transformers (the dense suite).

The tiny config is derived from MistralConfig itself (modelgraft.models.testing.tiny), so its sizes satisfy the
model's own constraints; the suite checks only the slots this scaffold guards.
"""

from transformers import MistralConfig

from modelgraft.models.testing.dense_suite import DenseModel, DenseParitySuite

MISTRAL = DenseModel(
    model_type="mistral",
    config_class=MistralConfig,
    causal_lm="MistralForCausalLM",
    sequence_classification="MistralForSequenceClassification",
    guarded=("rms_norm", "glu_activation", "rope", "causal_lm_loss", "sequence_classification_loss"),
    derived_sizes=True,
)


class TestMistralParity(DenseParitySuite):
    model = MISTRAL
