"""Llama: the generated modeling matches upstream transformers (the dense suite, nothing model-specific)."""

from transformers import LlamaConfig

from modelgraft.models.testing.dense_suite import DenseModel, DenseParitySuite

LLAMA = DenseModel(
    model_type="llama",
    config_class=LlamaConfig,
    causal_lm="LlamaForCausalLM",
    sequence_classification="LlamaForSequenceClassification",
)


class TestLlamaParity(DenseParitySuite):
    model = LLAMA
