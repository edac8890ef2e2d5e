"""Qwen2-VL: generated modeling registered under HF model_type "qwen2_vl", with upstream's processor."""

from modelgraft.models.registry import register_model

register_model(
    "qwen2_vl",
    modeling={"gpu": "modelgraft.models.qwen2_vl.generated.patched_modeling_qwen2_vl_gpu"},
    config="transformers.Qwen2VLConfig",
    processor="transformers.Qwen2VLProcessor",
)
register_model(
    "qwen2_vl_text",
    modeling={"gpu": "modelgraft.models.qwen2_vl.generated.patched_modeling_qwen2_vl_gpu"},
    config="transformers.Qwen2VLTextConfig",
)
