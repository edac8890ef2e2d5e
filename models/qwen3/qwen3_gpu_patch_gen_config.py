"""Qwen3 (dense text), GPU backend: op-slot guards and the fused-loss heads."""

from generator import PatchConfig
from generator.recipes import dense_text

config = PatchConfig(
    source_module="transformers.models.qwen3.modeling_qwen3",
    target_file="patched_modeling_qwen3_gpu.py",
    description="Qwen3 with op-slot guards (RMSNorm, gated MLP, RoPE) and slot-backed losses",
)
dense_text(config, prefix="Qwen3")
