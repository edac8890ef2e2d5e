"""Qwen3-VL: generated modeling registered under HF model_type "qwen3_vl", with upstream's processor."""

from modelgraft.models.registry import register_model

register_model(
    "qwen3_vl",
    modeling={"gpu": "modelgraft.models.qwen3_vl.generated.patched_modeling_qwen3_vl_gpu"},
    config="transformers.Qwen3VLConfig",
    processor="transformers.Qwen3VLProcessor",
)
register_model(
    "qwen3_vl_vision",
    modeling={"gpu": "modelgraft.models.qwen3_vl.generated.patched_modeling_qwen3_vl_gpu"},
    config="transformers.Qwen3VLVisionConfig",
)
register_model(
    "qwen3_vl_text",
    modeling={"gpu": "modelgraft.models.qwen3_vl.generated.patched_modeling_qwen3_vl_gpu"},
    config="transformers.Qwen3VLTextConfig",
)
