"""DeepSeek-V3: the generated modeling matches upstream transformers (the MoE suite).

The tiny config is derived from DeepseekV3Config itself (models.testing.tiny), so its sizes satisfy the
model's own constraints; the suite checks only the slots this scaffold guards. Two shared experts (so the
shared MLP is 2 * moe_intermediate_size wide, unlike the dense one) and a routed scaling factor other than
the default, so a router kernel that hard-codes 2.5 shows. Upstream computes no aux loss and records no
router logits for DeepSeek-V3; test_deepseek_v3_routing.py compares every router's outputs instead.
"""

from transformers import DeepseekV3Config

from modelgraft.models.testing.moe_suite import MoeModel, MoeParitySuite

DEEPSEEK_V3 = MoeModel(
    model_type="deepseek_v3",
    config_class=DeepseekV3Config,
    causal_lm="DeepseekV3ForCausalLM",
    sequence_classification="DeepseekV3ForSequenceClassification",
    sizes={"n_shared_experts": 2, "routed_scaling_factor": 1.75},
    guarded=(
        "rms_norm",
        "gated_mlp",
        "moe_experts",
        "group_limited_router",
        "causal_lm_loss",
        "sequence_classification_loss",
    ),
    derived_sizes=True,
    num_experts_attr="num_local_experts",
)


class TestDeepseekV3Parity(MoeParitySuite):
    model = DEEPSEEK_V3
