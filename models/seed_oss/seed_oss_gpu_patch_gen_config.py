"""Seed-OSS (dense text), GPU backend: op-slot guards and the fused-loss heads.

Seed-OSS's MLP ends in a residual dropout, which stays on both paths: the guard wraps only the projections.
"""

from generator import PatchConfig
from generator.recipes import dense_text

config = PatchConfig(
    source_module="transformers.models.seed_oss.modeling_seed_oss",
    target_file="patched_modeling_seed_oss_gpu.py",
    description="Seed-OSS with op-slot guards (RMSNorm, gated MLP, RoPE) and slot-backed losses",
)
dense_text(config, prefix="SeedOss")
