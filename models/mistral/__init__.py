"""Mistral: generated modeling registered under HF model_type "mistral"."""

from modelgraft.models.registry import register_model

register_model(
    "mistral",
    modeling={"gpu": "modelgraft.models.mistral.generated.patched_modeling_mistral_gpu"},
    config="transformers.MistralConfig",
)
