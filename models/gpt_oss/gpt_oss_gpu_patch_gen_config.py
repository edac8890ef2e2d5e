"""GptOss (MoE text), GPU backend: op-slot guards read from upstream's structure.

Left as upstream's code (no snippet covers them):

- rope: apply_rotary_pos_emb (line 227): apply_rotary_pos_emb (line 227) is not a known body: a different
  formulation; replace it by hand to guard it (replace_function)
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import Experts, LossHead, Norm, Router, moe_text

config = PatchConfig(
    source_module="transformers.models.gpt_oss.modeling_gpt_oss",
    target_file="patched_modeling_gpt_oss_gpu.py",
    description="GptOss with op-slot guards and slot-backed losses",
)
moe_text(
    config,
    prefix="GptOss",
    norms=[Norm("GptOssRMSNorm", formulation="rms_weight_cast_last", eps="variance_epsilon", weight="weight")],
    mlps=[],
    rope=None,
    causal_lm=LossHead("GptOssForCausalLM", softcap="", scale=()),
    experts=Experts(
        "GptOssMLP",
        activation='"silu"',
        layout="transposed",
        interleaved=True,
        gate_up_bias="gate_up_proj_bias",
        down_bias="down_proj_bias",
        limit="self.experts.limit",
        alpha="self.experts.alpha",
    ),
    router=Router("GptOssTopKRouter", kind="topk_softmax"),
    aux_loss="load_balancing_loss_func",
    sequence_classification="GptOssForSequenceClassification",
)
