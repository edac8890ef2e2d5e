"""Seed-OSS: generated modeling registered under HF model_type "seed_oss"."""

from modelgraft.models.registry import register_model

register_model(
    "seed_oss",
    modeling={"gpu": "modelgraft.models.seed_oss.generated.patched_modeling_seed_oss_gpu"},
    config="transformers.SeedOssConfig",
)
