"""HyperCLOVAX: generated modeling registered under HF model_type "hyperclovax"."""

from modelgraft.models.registry import register_model

register_model(
    "hyperclovax",
    modeling={"gpu": "modelgraft.models.hyperclovax.generated.patched_modeling_hyperclovax_gpu"},
    config="transformers.HyperCLOVAXConfig",
)
