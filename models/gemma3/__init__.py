"""Gemma3 (text path): generated modeling registered under HF model_type "gemma3_text".

The multimodal "gemma3" model_type (Gemma3ForConditionalGeneration on Gemma3Config) is not
registered: its classes are excluded from the generated module.
"""

from modelgraft.models.registry import register_model

register_model(
    "gemma3_text",
    modeling={"gpu": "modelgraft.models.gemma3.generated.patched_modeling_gemma3_gpu"},
    config="transformers.Gemma3TextConfig",
)
