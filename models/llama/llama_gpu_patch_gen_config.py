"""Llama (dense text), GPU backend: the minimal dense example."""

from generator import PatchConfig
from generator.recipes import dense_text

config = PatchConfig(
    source_module="transformers.models.llama.modeling_llama",
    target_file="patched_modeling_llama_gpu.py",
    description="Llama with op-slot guards (RMSNorm, gated MLP, RoPE) and slot-backed losses",
)
dense_text(config, prefix="Llama")
