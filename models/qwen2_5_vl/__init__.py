"""Qwen2.5-VL: generated modeling registered under HF model_type "qwen2_5_vl", with upstream's processor."""

from modelgraft.models.registry import register_model

register_model(
    "qwen2_5_vl",
    modeling={"gpu": "modelgraft.models.qwen2_5_vl.generated.patched_modeling_qwen2_5_vl_gpu"},
    config="transformers.Qwen2_5_VLConfig",
    processor="transformers.Qwen2_5_VLProcessor",
)
register_model(
    "qwen2_5_vl_vision",
    modeling={"gpu": "modelgraft.models.qwen2_5_vl.generated.patched_modeling_qwen2_5_vl_gpu"},
    config="transformers.Qwen2_5_VLVisionConfig",
)
register_model(
    "qwen2_5_vl_text",
    modeling={"gpu": "modelgraft.models.qwen2_5_vl.generated.patched_modeling_qwen2_5_vl_gpu"},
    config="transformers.Qwen2_5_VLTextConfig",
)
