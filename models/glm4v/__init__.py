"""Glm4v: generated modeling registered under HF model_type "glm4v", with upstream's processor."""

from modelgraft.models.registry import register_model

register_model(
    "glm4v",
    modeling={"gpu": "modelgraft.models.glm4v.generated.patched_modeling_glm4v_gpu"},
    config="transformers.Glm4vConfig",
    processor="transformers.Glm4vProcessor",
)
register_model(
    "glm4v_vision",
    modeling={"gpu": "modelgraft.models.glm4v.generated.patched_modeling_glm4v_gpu"},
    config="transformers.Glm4vVisionConfig",
)
register_model(
    "glm4v_text",
    modeling={"gpu": "modelgraft.models.glm4v.generated.patched_modeling_glm4v_gpu"},
    config="transformers.Glm4vTextConfig",
)
