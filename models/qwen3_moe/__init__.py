"""Qwen3-MoE: generated modeling registered under HF model_type "qwen3_moe", with its checkpoint converter."""

from models.converters.registry import register_converter
from models.registry import register_model

register_model(
    "qwen3_moe",
    modeling={
        "gpu": "models.qwen3_moe.generated.patched_modeling_qwen3_moe_gpu",
        "npu": "models.qwen3_moe.generated.patched_modeling_qwen3_moe_npu",
    },
    config="transformers.Qwen3MoeConfig",
)
register_converter("qwen3_moe", "models.qwen3_moe.checkpoint.checkpoint_converter")
