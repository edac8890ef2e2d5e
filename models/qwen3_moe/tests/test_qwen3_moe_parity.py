"""Qwen3-MoE: the generated modeling matches upstream transformers; hub checkpoints load.

Layers 0 and 2 route over 7 experts (4 per token, moe_intermediate_size 28, so gate_up_proj is
[7, 56, 48] and down_proj [7, 48, 28]: no two dims coincide); layer 1 is in ``mlp_only_layers`` and
keeps the dense MLP, so both kinds of layer are exercised. ``norm_topk_prob`` is on, as in the
released Qwen3-MoE checkpoints, and the aux-loss coefficient is large enough to move the gradients.
"""

from transformers import Qwen3MoeConfig

from modelgraft.models.testing.moe_suite import MoeModel, MoeParitySuite

QWEN3_MOE = MoeModel(
    model_type="qwen3_moe",
    config_class=Qwen3MoeConfig,
    causal_lm="Qwen3MoeForCausalLM",
    sequence_classification="Qwen3MoeForSequenceClassification",
    guarded=(
        "rms_norm",
        "glu_activation",
        "rope",
        "moe_experts",
        "softmax_topk_router",
        "causal_lm_loss",
        "load_balancing_loss",
        "sequence_classification_loss",
    ),
    sizes={
        "num_experts": 7,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 28,
        "mlp_only_layers": [1],
        "norm_topk_prob": True,
        "router_aux_loss_coef": 0.25,
    },
)


class TestQwen3MoeParity(MoeParitySuite):
    model = QWEN3_MOE


def test_tiny_config_mixes_sparse_and_dense_layers() -> None:
    from modelgraft.models.loader import build_model

    model = build_model(QWEN3_MOE.config(), architecture=QWEN3_MOE.causal_lm)
    kinds = [type(layer.mlp).__name__ for layer in model.model.layers]
    assert kinds == ["Qwen3MoeSparseMoeBlock", "Qwen3MoeMLP", "Qwen3MoeSparseMoeBlock"]
