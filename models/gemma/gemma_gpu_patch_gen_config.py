"""Gemma (dense text), GPU backend: op-slot guards read from upstream's structure.

Every norm, MLP and RoPE function upstream has is guarded.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import LossHead, Mlp, Norm, dense_text

config = PatchConfig(
    source_module="transformers.models.gemma.modeling_gemma",
    target_file="patched_modeling_gemma_gpu.py",
    description="Gemma with op-slot guards and slot-backed losses",
)
dense_text(
    config,
    prefix="Gemma",
    norms=[Norm("GemmaRMSNorm", formulation="rms_one_plus_weight", eps="eps", weight="weight")],
    mlps=[
        Mlp(
            "GemmaMLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
        )
    ],
    rope="apply_rotary_pos_emb",
    causal_lm=LossHead("GemmaForCausalLM", softcap="", scale=()),
    sequence_classification="GemmaForSequenceClassification",
)
