"""Exaone4: the generated modeling matches upstream transformers (the dense suite).

The tiny config is derived from Exaone4Config itself (modelgraft.models.testing.tiny), so its sizes satisfy the
model's own constraints; the suite checks only the slots this scaffold guards.
"""

from transformers import Exaone4Config

from modelgraft.models.testing.dense_suite import DenseModel, DenseParitySuite

EXAONE4 = DenseModel(
    model_type="exaone4",
    config_class=Exaone4Config,
    causal_lm="Exaone4ForCausalLM",
    sequence_classification="Exaone4ForSequenceClassification",
    guarded=("rms_norm", "glu_activation", "rope", "causal_lm_loss", "sequence_classification_loss"),
    derived_sizes=True,
)


class TestExaone4Parity(DenseParitySuite):
    model = EXAONE4
