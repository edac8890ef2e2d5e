"""SigLIP (vision encoder): generated modeling registered under HF model_type "siglip_vision_model".

The vision tower of composed VLMs (PaliGemma, Gemma 3, LLaVA-OneVision...), which build it from their
``vision_config`` (docs/vision-encoders.md). Only the vision model_type is registered: the text model and the
contrastive ``SiglipModel`` stay in the generated module as upstream's classes, but nothing resolves to them.
"""

from modelgraft.models.registry import register_model

register_model(
    "siglip_vision_model",
    modeling={"gpu": "modelgraft.models.siglip.generated.patched_modeling_siglip_gpu"},
    config="transformers.SiglipVisionConfig",
)
