"""Mistral (dense text), GPU backend: op-slot guards read from upstream's structure.

Every norm, MLP and RoPE function upstream has is guarded.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import LossHead, Mlp, Norm, dense_text

config = PatchConfig(
    source_module="transformers.models.mistral.modeling_mistral",
    target_file="patched_modeling_mistral_gpu.py",
    description="Mistral with op-slot guards and slot-backed losses",
)
dense_text(
    config,
    prefix="Mistral",
    norms=[Norm("MistralRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp(
            "MistralMLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
        )
    ],
    rope="apply_rotary_pos_emb",
    causal_lm=LossHead("MistralForCausalLM", softcap="", scale=()),
    sequence_classification="MistralForSequenceClassification",
)
