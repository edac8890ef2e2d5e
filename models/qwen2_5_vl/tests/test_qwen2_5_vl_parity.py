"""Qwen2.5-VL: the generated modeling matches upstream transformers on images, videos and text.

Text: 2 layers of hidden 72, 6 heads of 12 (kv 2), intermediate 80, RoPE sections [1, 2, 3] (pairwise distinct,
so a section taken from the wrong axis shows). Vision: 2 blocks of hidden 40 (2 heads of 20), intermediate 56,
patch 4, merge 2 (patch rows of 3 * 2 * 4 * 4 = 96, merger 160 -> 72), window attention in block 0 with windows
of 2 x 2 merged patches (the 16 x 24 image spans two, one padded) and full attention in block 1.
"""

from transformers import Qwen2_5_VLConfig, Qwen2_5_VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from modelgraft.models.testing.vlm_suite import VlmModel, VlmParitySuite

QWEN2_5_VL = VlmModel(
    model_type="qwen2_5_vl",
    config_class=Qwen2_5_VLConfig,
    processor_class=Qwen2_5_VLProcessor,
    image_processor_class=Qwen2VLImageProcessorPil,
    causal_lm="Qwen2_5_VLForConditionalGeneration",
    base_model="Qwen2_5_VLModel",
    patch_config="modelgraft.models.qwen2_5_vl.qwen2_5_vl_gpu_patch_gen_config",
    text_config={
        "hidden_size": 72,
        "intermediate_size": 80,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "max_position_embeddings": 64,
        "rms_norm_eps": 3e-5,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 2, 3]},
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
        "window_size": 16,
        "fullatt_block_indexes": [1],
        "tokens_per_second": 3,
    },
)


class TestQwen2_5_VLParity(VlmParitySuite):
    model = QWEN2_5_VL
