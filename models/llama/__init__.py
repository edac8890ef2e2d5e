"""Llama: generated modeling registered under HF model_type "llama"."""

from modelgraft.models.registry import register_model

register_model(
    "llama",
    modeling={"gpu": "modelgraft.models.llama.generated.patched_modeling_llama_gpu"},
    config="transformers.LlamaConfig",
)
