"""Pixtral (vision encoder): generated modeling registered under HF model_type "pixtral".

The vision tower of Mistral's composed VLMs (Mistral 3, LightOnOCR...), which build it from their ``vision_config``
(docs/vision-encoders.md). ``pixtral`` is the vision config's own model_type (``PixtralVisionConfig``); upstream's
``AutoModel`` builds ``PixtralVisionModel`` for it, and that is the one class the module has besides its base class.
"""

from modelgraft.models.registry import register_model

register_model(
    "pixtral",
    modeling={"gpu": "modelgraft.models.pixtral.generated.patched_modeling_pixtral_gpu"},
    config="transformers.PixtralVisionConfig",
)
