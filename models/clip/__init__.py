"""CLIP (vision encoder): generated modeling registered under HF model_type "clip_vision_model".

The vision tower of composed VLMs (LLaVA, LLaVA-NeXT...), which build it from their ``vision_config``
(docs/vision-encoders.md). Only the vision model_type is registered: the text model and the contrastive
``CLIPModel`` stay in the generated module as upstream's classes, but nothing resolves to them.
"""

from modelgraft.models.registry import register_model

register_model(
    "clip_vision_model",
    modeling={"gpu": "modelgraft.models.clip.generated.patched_modeling_clip_gpu"},
    config="transformers.CLIPVisionConfig",
)
