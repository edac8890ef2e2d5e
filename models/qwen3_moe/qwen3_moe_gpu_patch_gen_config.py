"""Qwen3-MoE (MoE text), GPU backend: op-slot guards, routed experts behind a slot, slot-backed losses."""

from generator import PatchConfig
from generator.recipes import moe_text

config = PatchConfig(
    source_module="transformers.models.qwen3_moe.modeling_qwen3_moe",
    target_file="patched_modeling_qwen3_moe_gpu.py",
    description="Qwen3-MoE with op-slot guards (RMSNorm, gated MLP, RoPE, routed experts), slot-backed losses "
    "and an expert-parallel plan",
)
moe_text(config, prefix="Qwen3Moe")
