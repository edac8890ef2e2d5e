"""GLM-MoE-DSA: generated modeling registered under HF model_type "glm_moe_dsa", with its checkpoint converter."""

from modelgraft.models.converters.registry import register_converter
from modelgraft.models.registry import register_model

register_model(
    "glm_moe_dsa",
    modeling={"gpu": "modelgraft.models.glm_moe_dsa.generated.patched_modeling_glm_moe_dsa_gpu"},
    config="transformers.GlmMoeDsaConfig",
)
register_converter("glm_moe_dsa", "modelgraft.models.glm_moe_dsa.checkpoint.checkpoint_converter")
