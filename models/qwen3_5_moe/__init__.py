"""Qwen3.5-MoE: generated modeling registered under HF model_type "qwen3_5_moe", with upstream's config and
processor (Qwen3VLProcessor, as transformers' AutoProcessor maps the type) and its checkpoint converter."""

from modelgraft.models.converters.registry import register_converter
from modelgraft.models.registry import register_model

register_model(
    "qwen3_5_moe",
    modeling={"gpu": "modelgraft.models.qwen3_5_moe.generated.patched_modeling_qwen3_5_moe_gpu"},
    config="transformers.Qwen3_5MoeConfig",
    processor="transformers.Qwen3VLProcessor",
)
register_converter("qwen3_5_moe", "modelgraft.models.qwen3_5_moe.checkpoint.checkpoint_converter")
register_model(
    "qwen3_5_moe_vision",
    modeling={"gpu": "modelgraft.models.qwen3_5_moe.generated.patched_modeling_qwen3_5_moe_gpu"},
    config="transformers.Qwen3_5MoeVisionConfig",
)
register_model(
    "qwen3_5_moe_text",
    modeling={"gpu": "modelgraft.models.qwen3_5_moe.generated.patched_modeling_qwen3_5_moe_gpu"},
    config="transformers.Qwen3_5MoeTextConfig",
)
