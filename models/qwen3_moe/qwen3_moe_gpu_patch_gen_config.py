"""Qwen3-MoE (MoE text), GPU backend: op-slot guards read from upstream's structure.

Every norm, MLP and RoPE function upstream has is guarded.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import Experts, LossHead, Mlp, Norm, Router, moe_text

config = PatchConfig(
    source_module="transformers.models.qwen3_moe.modeling_qwen3_moe",
    target_file="patched_modeling_qwen3_moe_gpu.py",
    description="Qwen3-MoE with op-slot guards and slot-backed losses",
)
moe_text(
    config,
    prefix="Qwen3Moe",
    norms=[Norm("Qwen3MoeRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp(
            "Qwen3MoeMLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
        )
    ],
    rope="apply_rotary_pos_emb",
    causal_lm=LossHead("Qwen3MoeForCausalLM", softcap="", scale=()),
    experts=Experts("Qwen3MoeSparseMoeBlock", activation="self.experts.config.hidden_act"),
    router=Router("Qwen3MoeTopKRouter", kind="softmax_topk"),
    aux_loss="load_balancing_loss_func",
    sequence_classification="Qwen3MoeForSequenceClassification",
)
