"""Qwen3-VL: the generated modeling matches upstream transformers on images, videos and text.

Text: 2 layers of hidden 72, 6 heads of 14 (kv 2; q 84, kv 28), intermediate 88, interleaved RoPE sections
[3, 2, 2]. Vision: 2 blocks of hidden 40 (2 heads of 20), intermediate 56, patch 4, merge 2 (patch rows of
3 * 2 * 4 * 4 = 96, mergers 160 -> 72), a 6 x 6 learned position grid, and one DeepStack merger after block 0,
whose features the first decoder layer adds at the vision positions.
"""

from transformers import Qwen3VLConfig, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from modelgraft.models.loader import build_model
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.vlm_suite import VlmModel, VlmParitySuite

QWEN3_VL = VlmModel(
    model_type="qwen3_vl",
    config_class=Qwen3VLConfig,
    processor_class=Qwen3VLProcessor,
    image_processor_class=Qwen2VLImageProcessorPil,
    causal_lm="Qwen3VLForConditionalGeneration",
    base_model="Qwen3VLModel",
    patch_config="modelgraft.models.qwen3_vl.qwen3_vl_gpu_patch_gen_config",
    text_config={
        "hidden_size": 72,
        "intermediate_size": 88,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "head_dim": 14,
        "num_hidden_layers": 2,
        "max_position_embeddings": 64,
        "rms_norm_eps": 3e-5,
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
    guarded=("rms_norm", "activation", "layer_norm", "glu_activation", "rope", "rope_vision", "causal_lm_loss"),
)


class TestQwen3VLParity(VlmParitySuite):
    model = QWEN3_VL


def test_the_towers_are_the_generated_classes_not_automodels() -> None:
    """Upstream builds them with AutoModel.from_config, which resolves to upstream's classes; ours must not."""
    module = MODELING_REGISTRY.get_module("qwen3_vl", "gpu")
    model = build_model(QWEN3_VL.config(), architecture=QWEN3_VL.causal_lm)
    assert type(model.model.visual) is module.Qwen3VLVisionModel
    assert type(model.model.language_model) is module.Qwen3VLTextModel
