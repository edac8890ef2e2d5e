"""DeepSeek-V3 (MoE text), GPU backend: op-slot guards read from upstream's structure.

Left as upstream's code (no snippet covers them):

- rope: apply_rotary_pos_emb (line 297): the module also defines apply_rotary_pos_emb_interleave, which a guard
  leaves as upstream has it
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import Experts, LossHead, Mlp, Norm, Router, moe_text

config = PatchConfig(
    source_module="transformers.models.deepseek_v3.modeling_deepseek_v3",
    target_file="patched_modeling_deepseek_v3_gpu.py",
    description="DeepSeek-V3 with op-slot guards and slot-backed losses",
)
moe_text(
    config,
    prefix="DeepseekV3",
    norms=[Norm("DeepseekV3RMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp(
            "DeepseekV3MLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
            whole=True,
        )
    ],
    rope=None,
    causal_lm=LossHead("DeepseekV3ForCausalLM", softcap="", scale=()),
    experts=Experts("DeepseekV3MoE", activation="self.experts.config.hidden_act"),
    router=Router("DeepseekV3TopkRouter"),
    aux_loss="",
    sequence_classification="DeepseekV3ForSequenceClassification",
)
