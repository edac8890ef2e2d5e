"""Qwen3.5-MoE: the generated modeling matches upstream transformers on images, videos and text, its Gated
DeltaNet layers and routed experts included; per-expert checkpoints load.

Text: 2 layers, a Gated DeltaNet layer then a full-attention one, hidden 72; attention 6 heads of 16 (kv 2), the
rotary half of each head (8 dims, interleaved sections [2, 1, 1]); linear attention 2 key heads of 8 repeated to
4 value heads of 12, a width-4 conv. Every layer routes over 7 experts (4 per token, moe_intermediate_size 28:
gate_up_proj [7, 56, 72], down_proj [7, 72, 28]) beside a gated shared expert of 20; the aux-loss coefficient is
large enough to move the gradients. Vision as Qwen3.5's test: 2 blocks of hidden 40, patch 4, merge 2.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import Qwen3_5MoeConfig, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.moe_suite import per_expert_state_dict
from modelgraft.models.testing.vlm_moe_suite import VlmMoeModel, VlmMoeParitySuite

QWEN3_5_MOE = VlmMoeModel(
    model_type="qwen3_5_moe",
    config_class=Qwen3_5MoeConfig,
    processor_class=Qwen3VLProcessor,
    image_processor_class=Qwen2VLImageProcessorPil,
    causal_lm="Qwen3_5MoeForConditionalGeneration",
    base_model="Qwen3_5MoeModel",
    patch_config="modelgraft.models.qwen3_5_moe.qwen3_5_moe_gpu_patch_gen_config",
    text_config={
        "hidden_size": 72,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_hidden_layers": 2,
        "layer_types": ["linear_attention", "full_attention"],
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 12,
        "linear_conv_kernel_dim": 4,
        "num_experts": 7,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 28,
        "shared_expert_intermediate_size": 20,
        "router_aux_loss_coef": 0.25,
        "max_position_embeddings": 64,
        "rms_norm_eps": 3e-5,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "mrope_section": [2, 1, 1],
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
        "rms_norm_gated",
        "causal_conv1d",
        "chunk_gated_delta_rule",
    ),
    router="Qwen3_5MoeTopKRouter",
)


class TestQwen3_5MoeParity(VlmMoeParitySuite):
    model = QWEN3_5_MOE

    # The suite's hub-layout tests read Qwen3-VL-MoE's hub layout (fused experts stored transposed), which
    # transformers converts for that model type only; Qwen3.5-MoE's hub stores experts one by one, and
    # TestQwen3_5MoeHubCheckpoint below holds the converter to transformers on that layout instead.
    test_hub_layout_checkpoint_loads_as_transformers_loads_it = None  # type: ignore[assignment]
    test_hub_layout_is_told_from_the_other_projection_where_gate_up_is_square = None  # type: ignore[assignment]


def test_the_towers_are_the_generated_classes_not_automodels() -> None:
    """Upstream builds them with AutoModel.from_config, which resolves to upstream's classes; ours must not."""
    module = MODELING_REGISTRY.get_module("qwen3_5_moe", "gpu")
    model = build_model(QWEN3_5_MOE.config(), architecture=QWEN3_5_MOE.causal_lm)
    assert type(model.model.visual) is module.Qwen3_5MoeVisionModel
    assert type(model.model.language_model) is module.Qwen3_5MoeTextModel


def test_the_tiny_model_has_both_mixers_each_over_routed_experts() -> None:
    module = MODELING_REGISTRY.get_module("qwen3_5_moe", "gpu")
    layers = build_model(QWEN3_5_MOE.config(), architecture=QWEN3_5_MOE.causal_lm).model.language_model.layers
    assert type(layers[0].linear_attn) is module.Qwen3_5MoeGatedDeltaNet
    assert type(layers[1].self_attn) is module.Qwen3_5MoeAttention
    assert all(type(layer.mlp) is module.Qwen3_5MoeSparseMoeBlock for layer in layers)


class TestQwen3_5MoeHubCheckpoint:
    """Qwen3.5-MoE's hub checkpoints store experts one by one, which transformers fuses on load (the "qwen2_moe"
    conversion it adds to "qwen3_5_moe_text"); the converter must read such a file to the same weights."""

    def test_per_expert_hub_checkpoint_loads_as_transformers_loads_it(self, tmp_path: Path) -> None:
        suite = TestQwen3_5MoeParity()
        source = suite._upstream()
        source.config.save_pretrained(tmp_path)
        save_file(per_expert_state_dict(source.state_dict()), str(tmp_path / "model.safetensors"))
        upstream_cls = get_model_class("qwen3_5_moe", QWEN3_5_MOE.causal_lm, use_hf=True)
        by_transformers = upstream_cls.from_pretrained(tmp_path, experts_implementation="eager").state_dict()
        ours = suite._generated_from(tmp_path / "model.safetensors", "gpu").state_dict()
        assert set(ours) == set(by_transformers)
        for name, tensor in ours.items():
            assert torch.equal(tensor, by_transformers[name]), f"{name} differs from transformers' own loading"
            assert torch.equal(tensor, source.state_dict()[name]), f"{name} differs from the saved model"
