"""Qwen3-VL-MoE: generated modeling registered under HF model_type "qwen3_vl_moe", with upstream's processor and
its checkpoint converter."""

from modelgraft.models.converters.registry import register_converter
from modelgraft.models.registry import register_model

register_model(
    "qwen3_vl_moe",
    modeling={"gpu": "modelgraft.models.qwen3_vl_moe.generated.patched_modeling_qwen3_vl_moe_gpu"},
    config="transformers.Qwen3VLMoeConfig",
    processor="transformers.Qwen3VLProcessor",
)
register_model(
    "qwen3_vl_moe_vision",
    modeling={"gpu": "modelgraft.models.qwen3_vl_moe.generated.patched_modeling_qwen3_vl_moe_gpu"},
    config="transformers.Qwen3VLMoeVisionConfig",
)
register_model(
    "qwen3_vl_moe_text",
    modeling={"gpu": "modelgraft.models.qwen3_vl_moe.generated.patched_modeling_qwen3_vl_moe_gpu"},
    config="transformers.Qwen3VLMoeTextConfig",
)
register_converter("qwen3_vl_moe", "modelgraft.models.qwen3_vl_moe.checkpoint.checkpoint_converter")
