"""Qwen2 (dense text), GPU backend: op-slot guards read from upstream's structure.

Every norm, MLP and RoPE function upstream has is guarded.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import LossHead, Mlp, Norm, dense_text

config = PatchConfig(
    source_module="transformers.models.qwen2.modeling_qwen2",
    target_file="patched_modeling_qwen2_gpu.py",
    description="Qwen2 with op-slot guards and slot-backed losses",
)
dense_text(
    config,
    prefix="Qwen2",
    norms=[Norm("Qwen2RMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp(
            "Qwen2MLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
        )
    ],
    rope="apply_rotary_pos_emb",
    causal_lm=LossHead("Qwen2ForCausalLM", softcap="", scale=()),
    sequence_classification="Qwen2ForSequenceClassification",
)
