"""Exaone4 (dense text), GPU backend: op-slot guards read from upstream's structure.

Every norm, MLP and RoPE function upstream has is guarded.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import LossHead, Mlp, Norm, dense_text

config = PatchConfig(
    source_module="transformers.models.exaone4.modeling_exaone4",
    target_file="patched_modeling_exaone4_gpu.py",
    description="Exaone4 with op-slot guards and slot-backed losses",
)
dense_text(
    config,
    prefix="Exaone4",
    norms=[Norm("Exaone4RMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp(
            "Exaone4MLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
        )
    ],
    rope="apply_rotary_pos_emb",
    causal_lm=LossHead("Exaone4ForCausalLM", softcap="", scale=()),
    sequence_classification="Exaone4ForSequenceClassification",
)
