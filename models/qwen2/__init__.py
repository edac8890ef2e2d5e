"""Qwen2: generated modeling registered under HF model_type "qwen2"."""

from modelgraft.models.registry import register_model

register_model(
    "qwen2",
    modeling={"gpu": "modelgraft.models.qwen2.generated.patched_modeling_qwen2_gpu"},
    config="transformers.Qwen2Config",
)
