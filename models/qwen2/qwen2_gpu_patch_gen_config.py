"""Qwen2 (dense text), GPU backend: op-slot guards and the fused-loss heads."""

from generator import PatchConfig
from generator.recipes import dense_text

config = PatchConfig(
    source_module="transformers.models.qwen2.modeling_qwen2",
    target_file="patched_modeling_qwen2_gpu.py",
    description="Qwen2 with op-slot guards (RMSNorm, gated MLP, RoPE) and slot-backed losses",
)
dense_text(config, prefix="Qwen2")
