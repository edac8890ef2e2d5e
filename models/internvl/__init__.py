"""InternVL: generated modeling registered under HF model_type "internvl", with upstream's processor."""

from modelgraft.models.registry import register_model

register_model(
    "internvl",
    modeling={"gpu": "modelgraft.models.internvl.generated.patched_modeling_internvl_gpu"},
    config="transformers.InternVLConfig",
    processor="transformers.InternVLProcessor",
)
register_model(
    "internvl_vision",
    modeling={"gpu": "modelgraft.models.internvl.generated.patched_modeling_internvl_gpu"},
    config="transformers.InternVLVisionConfig",
)
