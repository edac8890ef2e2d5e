"""Qwen3.5: generated modeling registered under HF model_type "qwen3_5", with upstream's config and processor
(Qwen3VLProcessor, as transformers' AutoProcessor maps the type)."""

from modelgraft.models.registry import register_model

register_model(
    "qwen3_5",
    modeling={"gpu": "modelgraft.models.qwen3_5.generated.patched_modeling_qwen3_5_gpu"},
    config="transformers.Qwen3_5Config",
    processor="transformers.Qwen3VLProcessor",
)
register_model(
    "qwen3_5_vision",
    modeling={"gpu": "modelgraft.models.qwen3_5.generated.patched_modeling_qwen3_5_gpu"},
    config="transformers.Qwen3_5VisionConfig",
)
register_model(
    "qwen3_5_text",
    modeling={"gpu": "modelgraft.models.qwen3_5.generated.patched_modeling_qwen3_5_gpu"},
    config="transformers.Qwen3_5TextConfig",
)
