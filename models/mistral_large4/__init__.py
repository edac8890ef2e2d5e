"""MistralLarge4: generated modeling registered under HF model_type "mistral_large4", with upstream's processor and
its checkpoint converter."""

from modelgraft.models.converters.registry import register_converter
from modelgraft.models.registry import register_model

register_model(
    "mistral_large4",
    modeling={"gpu": "modelgraft.models.mistral_large4.generated.patched_modeling_mistral_large4_gpu"},
    config="transformers.MistralLarge4Config",
    processor="transformers.PixtralProcessor",
)
register_model(
    "mistral_large4_text",
    modeling={"gpu": "modelgraft.models.mistral_large4.generated.patched_modeling_mistral_large4_gpu"},
    config="transformers.MistralLarge4TextConfig",
)
register_converter("mistral_large4", "modelgraft.models.mistral_large4.checkpoint.checkpoint_converter")
