"""Qwen3: the generated modeling matches upstream transformers.

Layer 0 attends fully and layers 1-2 through a 3-token sliding window, shorter than the 11-token test
batch, so the mask of each attention type reaches its layers.
"""

from transformers import Qwen3Config

from modelgraft.models.testing.dense_suite import DenseModel, DenseParitySuite

QWEN3 = DenseModel(
    model_type="qwen3",
    config_class=Qwen3Config,
    causal_lm="Qwen3ForCausalLM",
    sequence_classification="Qwen3ForSequenceClassification",
    sizes={"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1},
)


class TestQwen3Parity(DenseParitySuite):
    model = QWEN3


def test_tiny_config_mixes_full_and_sliding_layers() -> None:
    assert QWEN3.config().layer_types == ["full_attention", "sliding_attention", "sliding_attention"]
