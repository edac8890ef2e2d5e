"""GLM-ASR: generated modeling registered under HF model_type "glmasr", with upstream's processor."""

from modelgraft.models.registry import register_model

register_model(
    "glmasr",
    modeling={"gpu": "modelgraft.models.glmasr.generated.patched_modeling_glmasr_gpu"},
    config="transformers.GlmAsrConfig",
    processor="transformers.GlmAsrProcessor",
)
register_model(
    "glmasr_encoder",
    modeling={"gpu": "modelgraft.models.glmasr.generated.patched_modeling_glmasr_gpu"},
    config="transformers.GlmAsrEncoderConfig",
)
