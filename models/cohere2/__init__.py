"""Cohere2: generated modeling registered under HF model_type "cohere2"."""

from modelgraft.models.registry import register_model

register_model(
    "cohere2",
    modeling={"gpu": "modelgraft.models.cohere2.generated.patched_modeling_cohere2_gpu"},
    config="transformers.Cohere2Config",
)
