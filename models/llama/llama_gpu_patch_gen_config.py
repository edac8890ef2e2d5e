"""Llama (dense text), GPU backend: op-slot guards read from upstream's structure.

Every norm, MLP and RoPE function upstream has is guarded.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import LossHead, Mlp, Norm, dense_text

config = PatchConfig(
    source_module="transformers.models.llama.modeling_llama",
    target_file="patched_modeling_llama_gpu.py",
    description="Llama with op-slot guards and slot-backed losses",
)
dense_text(
    config,
    prefix="Llama",
    norms=[Norm("LlamaRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp(
            "LlamaMLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
        )
    ],
    rope="apply_rotary_pos_emb",
    causal_lm=LossHead("LlamaForCausalLM", softcap="", scale=()),
    sequence_classification="LlamaForSequenceClassification",
)
