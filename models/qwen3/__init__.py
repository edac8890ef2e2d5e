"""Qwen3: generated modeling registered under HF model_type "qwen3"."""

from modelgraft.models.registry import register_model

register_model(
    "qwen3",
    modeling={"gpu": "modelgraft.models.qwen3.generated.patched_modeling_qwen3_gpu"},
    config="transformers.Qwen3Config",
)
