"""Exaone4: generated modeling registered under HF model_type "exaone4"."""

from modelgraft.models.registry import register_model

register_model(
    "exaone4",
    modeling={"gpu": "modelgraft.models.exaone4.generated.patched_modeling_exaone4_gpu"},
    config="transformers.Exaone4Config",
)
