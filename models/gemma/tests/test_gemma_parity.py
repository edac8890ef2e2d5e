"""Gemma: the generated modeling matches upstream transformers (the dense suite).

The tiny config is derived from GemmaConfig itself (modelgraft.models.testing.tiny), so its sizes satisfy the
model's own constraints; the suite checks only the slots this scaffold guards.
"""

from transformers import GemmaConfig

from modelgraft.models.testing.dense_suite import DenseModel, DenseParitySuite

GEMMA = DenseModel(
    model_type="gemma",
    config_class=GemmaConfig,
    causal_lm="GemmaForCausalLM",
    sequence_classification="GemmaForSequenceClassification",
    guarded=("rms_norm", "glu_activation", "rope", "causal_lm_loss", "sequence_classification_loss"),
    derived_sizes=True,
)


class TestGemmaParity(DenseParitySuite):
    model = GEMMA
