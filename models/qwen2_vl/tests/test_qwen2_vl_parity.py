"""Qwen2-VL: the generated modeling matches upstream transformers on images, videos and text.

Text: 2 layers of hidden 72, 6 heads of 12 (kv 2), intermediate 88, RoPE sections [1, 2, 3] (pairwise distinct,
so a section taken from the wrong axis shows). Vision: 2 blocks of width 40 (2 heads of 20), MLP 80 (ratio 2,
quick_gelu), LayerNorms, patch 4, merge 2 (patch rows of 3 * 2 * 4 * 4 = 96, merger 160 -> 72).
"""

from transformers import Qwen2VLConfig, Qwen2VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from modelgraft.models.testing.vlm_suite import VlmModel, VlmParitySuite

QWEN2_VL = VlmModel(
    model_type="qwen2_vl",
    config_class=Qwen2VLConfig,
    processor_class=Qwen2VLProcessor,
    image_processor_class=Qwen2VLImageProcessorPil,
    causal_lm="Qwen2VLForConditionalGeneration",
    base_model="Qwen2VLModel",
    patch_config="modelgraft.models.qwen2_vl.qwen2_vl_gpu_patch_gen_config",
    text_config={
        "hidden_size": 72,
        "intermediate_size": 88,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "max_position_embeddings": 64,
        "rms_norm_eps": 3e-5,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 2, 3]},
    },
    vision_config={
        "embed_dim": 40,
        "hidden_size": 72,
        "mlp_ratio": 2,
        "num_heads": 2,
        "depth": 2,
        "patch_size": 4,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
    guarded=("rms_norm", "activation", "layer_norm", "glu_activation", "rope", "rope_vision", "causal_lm_loss"),
)


class TestQwen2VLParity(VlmParitySuite):
    model = QWEN2_VL
