"""Qwen3 (dense text), GPU backend: op-slot guards read from upstream's structure.

Every norm, MLP and RoPE function upstream has is guarded.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import LossHead, Mlp, Norm, dense_text

config = PatchConfig(
    source_module="transformers.models.qwen3.modeling_qwen3",
    target_file="patched_modeling_qwen3_gpu.py",
    description="Qwen3 with op-slot guards and slot-backed losses",
)
dense_text(
    config,
    prefix="Qwen3",
    norms=[Norm("Qwen3RMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp(
            "Qwen3MLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
        )
    ],
    rope="apply_rotary_pos_emb",
    causal_lm=LossHead("Qwen3ForCausalLM", softcap="", scale=()),
    sequence_classification="Qwen3ForSequenceClassification",
)
