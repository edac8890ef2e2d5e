"""Qwen3-VL-MoE: the generated modeling matches upstream transformers on images, videos and text; checkpoints load.

Text: 3 layers of hidden 72, 6 heads of 14 (kv 2), interleaved RoPE sections [3, 2, 2]; layers 0 and 2 route over
7 experts (4 per token, moe_intermediate_size 28: gate_up_proj [7, 56, 72], down_proj [7, 72, 28], no two dims
alike), layer 1 is in ``mlp_only_layers`` and keeps the dense MLP (intermediate 88), so both kinds of layer run.
The aux-loss coefficient is large enough to move the gradients. Vision as Qwen3-VL's test: 2 blocks of hidden 40,
patch 4, merge 2, a 6 x 6 learned position grid and one DeepStack merger after block 0.
"""

from transformers import Qwen3VLMoeConfig, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from modelgraft.models.loader import build_model
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.vlm_moe_suite import VlmMoeModel, VlmMoeParitySuite

QWEN3_VL_MOE = VlmMoeModel(
    model_type="qwen3_vl_moe",
    config_class=Qwen3VLMoeConfig,
    processor_class=Qwen3VLProcessor,
    image_processor_class=Qwen2VLImageProcessorPil,
    causal_lm="Qwen3VLMoeForConditionalGeneration",
    base_model="Qwen3VLMoeModel",
    patch_config="modelgraft.models.qwen3_vl_moe.qwen3_vl_moe_gpu_patch_gen_config",
    text_config={
        "hidden_size": 72,
        "intermediate_size": 88,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "head_dim": 14,
        "num_hidden_layers": 3,
        "max_position_embeddings": 64,
        "rms_norm_eps": 3e-5,
        "num_experts": 7,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 28,
        "mlp_only_layers": [1],
        "router_aux_loss_coef": 0.25,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [3, 2, 2],
            "mrope_interleaved": True,
        },
    },
    vision_config={
        "hidden_size": 40,
        "intermediate_size": 56,
        "num_heads": 2,
        "depth": 2,
        "out_hidden_size": 72,
        "patch_size": 4,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 36,
        "deepstack_visual_indexes": [0],
    },
    guarded=(
        "rms_norm",
        "activation",
        "layer_norm",
        "glu_activation",
        "rope",
        "rope_vision",
        "causal_lm_loss",
        "moe_experts",
        "softmax_topk_router",
        "load_balancing_loss",
    ),
    router="Qwen3VLMoeTextTopKRouter",
)


class TestQwen3VLMoeParity(VlmMoeParitySuite):
    model = QWEN3_VL_MOE


def test_the_towers_are_the_generated_classes_not_automodels() -> None:
    """Upstream builds them with AutoModel.from_config, which resolves to upstream's classes; ours must not."""
    module = MODELING_REGISTRY.get_module("qwen3_vl_moe", "gpu")
    model = build_model(QWEN3_VL_MOE.config(), architecture=QWEN3_VL_MOE.causal_lm)
    assert type(model.model.visual) is module.Qwen3VLMoeVisionModel
    assert type(model.model.language_model) is module.Qwen3VLMoeTextModel


def test_tiny_config_mixes_sparse_and_dense_layers() -> None:
    model = build_model(QWEN3_VL_MOE.config(), architecture=QWEN3_VL_MOE.causal_lm)
    kinds = [type(layer.mlp).__name__ for layer in model.model.language_model.layers]
    assert kinds == ["Qwen3VLMoeTextSparseMoeBlock", "Qwen3VLMoeTextMLP", "Qwen3VLMoeTextSparseMoeBlock"]
