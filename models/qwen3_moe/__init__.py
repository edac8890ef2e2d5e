"""Qwen3-MoE: generated modeling registered under HF model_type "qwen3_moe", with its checkpoint converter."""

from modelgraft.models.converters.registry import register_converter
from modelgraft.models.registry import register_model

register_model(
    "qwen3_moe",
    modeling={"gpu": "modelgraft.models.qwen3_moe.generated.patched_modeling_qwen3_moe_gpu"},
    config="transformers.Qwen3MoeConfig",
)
register_converter("qwen3_moe", "modelgraft.models.qwen3_moe.checkpoint.checkpoint_converter")
