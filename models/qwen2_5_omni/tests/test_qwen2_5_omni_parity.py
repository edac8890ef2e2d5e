"""Qwen2.5-Omni (thinker only): the generated modeling matches upstream transformers on images, videos and audio.

Text: 2 layers of hidden 72, 6 heads of 12 (kv 2), intermediate 80, RoPE sections [1, 2, 3] (pairwise distinct, so a
section taken from the wrong axis shows). Vision: 2 blocks of hidden 40 (2 heads of 20), intermediate 56, patch 4,
merge 2, window attention in block 0 and full attention in block 1. Audio: 16 mel bins, 2 layers of d_model 24 (2
heads), ffn 40, attention chunks of 16 mel frames (n_window 8: the 0.3 s clip spans two chunks, one padded), output
72. The whole-model checkpoint tests add a 1-layer talker and a 2-layer DiT with a one-stage BigVGAN.
"""

from transformers import Qwen2_5OmniConfig, Qwen2_5OmniProcessor, Qwen2_5OmniThinkerConfig
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from modelgraft.models.testing.omni_suite import OmniModel, OmniParitySuite

QWEN2_5_OMNI = OmniModel(
    model_type="qwen2_5_omni_thinker",
    config_class=Qwen2_5OmniThinkerConfig,
    processor_class=Qwen2_5OmniProcessor,
    image_processor_class=Qwen2VLImageProcessorPil,
    causal_lm="Qwen2_5OmniThinkerForConditionalGeneration",
    base_model="Qwen2_5OmniThinkerTextModel",
    patch_config="modelgraft.models.qwen2_5_omni.qwen2_5_omni_gpu_patch_gen_config",
    text_config={
        "hidden_size": 72,
        "intermediate_size": 80,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "max_position_embeddings": 128,
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
    },
    audio_config={
        "num_mel_bins": 16,
        "d_model": 24,
        "encoder_attention_heads": 2,
        "encoder_layers": 2,
        "encoder_ffn_dim": 40,
        "n_window": 8,
        "max_source_positions": 64,
        "output_dim": 72,
    },
    top_level="Qwen2_5OmniForConditionalGeneration",
    top_level_config_class=Qwen2_5OmniConfig,
    speech={
        "talker": {
            "hidden_size": 32,
            "embedding_size": 72,
            "intermediate_size": 40,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "vocab_size": 64,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        },
        "token2wav": {
            "dit_config": {
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "head_dim": 16,
                "emb_dim": 16,
                "num_embeds": 64,
                "mel_dim": 8,
                "enc_emb_dim": 16,
                "enc_dim": 16,
                "enc_channels": [16, 16, 16, 16, 48],
                "enc_attention_channels": 8,
                "enc_se_channels": 8,
                "look_ahead_layers": [1],
                "look_backward_layers": [0],
                "block_size": 4,
            },
            "bigvgan_config": {
                "mel_dim": 8,
                "upsample_initial_channel": 16,
                "resblock_kernel_sizes": [3],
                "resblock_dilation_sizes": [[1, 3, 5]],
                "upsample_rates": [2],
                "upsample_kernel_sizes": [4],
            },
        },
    },
    speech_classes=(
        "Qwen2_5OmniTalkerModel",
        "Qwen2_5OmniTalkerForConditionalGeneration",
        "Qwen2_5OmniToken2WavDiTModel",
        "Qwen2_5OmniToken2WavBigVGANModel",
        "Qwen2_5OmniToken2WavModel",
        "Qwen2_5OmniDiTRotaryEmbedding",
        "Qwen2_5OmniAMPBlock",
        "DiTAttention",
        "ECAPA_TimeDelayNet",
        "kaiser_sinc_filter1d",
    ),
)


class TestQwen2_5OmniParity(OmniParitySuite):
    model = QWEN2_5_OMNI
