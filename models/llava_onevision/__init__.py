"""LlavaOnevision: generated modeling registered under HF model_type "llava_onevision", with upstream's processor."""

from modelgraft.models.registry import register_model

register_model(
    "llava_onevision",
    modeling={"gpu": "modelgraft.models.llava_onevision.generated.patched_modeling_llava_onevision_gpu"},
    config="transformers.LlavaOnevisionConfig",
    processor="transformers.LlavaOnevisionProcessor",
)
