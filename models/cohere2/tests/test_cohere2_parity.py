"""Cohere2: the generated modeling matches upstream transformers (the dense suite).

The tiny config is derived from Cohere2Config itself (modelgraft.models.testing.tiny), so its sizes satisfy the
model's own constraints; the suite checks only the slots this scaffold guards.
"""

from transformers import Cohere2Config

from modelgraft.models.testing.dense_suite import DenseModel, DenseParitySuite

COHERE2 = DenseModel(
    model_type="cohere2",
    config_class=Cohere2Config,
    causal_lm="Cohere2ForCausalLM",
    sequence_classification=None,
    guarded=("glu_activation", "rope", "causal_lm_loss"),
    derived_sizes=True,
)


class TestCohere2Parity(DenseParitySuite):
    model = COHERE2
