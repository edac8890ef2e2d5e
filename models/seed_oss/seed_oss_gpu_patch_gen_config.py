"""Seed-OSS (dense text), GPU backend: op-slot guards read from upstream's structure.

Every norm, MLP and RoPE function upstream has is guarded.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import LossHead, Mlp, Norm, dense_text

config = PatchConfig(
    source_module="transformers.models.seed_oss.modeling_seed_oss",
    target_file="patched_modeling_seed_oss_gpu.py",
    description="Seed-OSS with op-slot guards and slot-backed losses",
)
dense_text(
    config,
    prefix="SeedOss",
    norms=[Norm("SeedOssRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp(
            "SeedOssMLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
        )
    ],
    rope="apply_rotary_pos_emb",
    causal_lm=LossHead("SeedOssForCausalLM", softcap="", scale=()),
    sequence_classification="SeedOssForSequenceClassification",
)
