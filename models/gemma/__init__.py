"""Gemma: generated modeling registered under HF model_type "gemma"."""

from modelgraft.models.registry import register_model

register_model(
    "gemma",
    modeling={"gpu": "modelgraft.models.gemma.generated.patched_modeling_gemma_gpu"},
    config="transformers.GemmaConfig",
)
