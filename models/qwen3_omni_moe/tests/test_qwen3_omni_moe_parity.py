"""Qwen3-Omni-MoE (thinker only): the generated modeling matches upstream transformers on images, videos and audio;
checkpoints load, the speech side's included.

Text: 3 layers of hidden 72, 6 heads of 14 (kv 2), interleaved RoPE sections [3, 2, 2]; layers 0 and 2 route over
7 experts (4 per token, moe_intermediate_size 28: gate_up_proj [7, 56, 72], down_proj [7, 72, 28]), without
renormalising the top-k weights (``norm_topk_prob`` off, upstream's default is on), layer 1 is in ``mlp_only_layers``
and keeps the dense MLP (intermediate 88); the aux-loss coefficient is large enough to move the gradients. Vision
as Qwen3-VL-MoE's test: 2 blocks of hidden 40, patch 4, merge 2, a 6 x 6 learned position grid, one DeepStack
merger after block 0. Audio: 16 mel bins, three stride-2 Conv2d of 8 channels run one chunk at a time
(``conv_chunksize`` 1), 2 layers of d_model 24, chunks of 100 mel frames (``n_window`` 50: the processor's own
length formula holds only for that chunk size) and attention windows of one chunk (``n_window_infer`` 100), so the
1.3 s clip spans two chunks and two windows; ``position_id_per_seconds`` 13, the processor's. The whole-model
checkpoint tests add a 1-layer MoE talker with a 1-layer code predictor and a 1-layer code2wav.
"""

from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeProcessor, Qwen3OmniMoeThinkerConfig
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from modelgraft.models.loader import build_model
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.omni_moe_suite import OmniMoeModel, OmniMoeParitySuite

QWEN3_OMNI_MOE = OmniMoeModel(
    model_type="qwen3_omni_moe_thinker",
    config_class=Qwen3OmniMoeThinkerConfig,
    processor_class=Qwen3OmniMoeProcessor,
    image_processor_class=Qwen2VLImageProcessorPil,
    causal_lm="Qwen3OmniMoeThinkerForConditionalGeneration",
    base_model="Qwen3OmniMoeThinkerTextModel",
    patch_config="modelgraft.models.qwen3_omni_moe.qwen3_omni_moe_gpu_patch_gen_config",
    text_config={
        "hidden_size": 72,
        "intermediate_size": 88,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "head_dim": 14,
        "num_hidden_layers": 3,
        "max_position_embeddings": 128,
        "rms_norm_eps": 3e-5,
        "num_experts": 7,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 28,
        "mlp_only_layers": [1],
        "norm_topk_prob": False,
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
    audio_config={
        "num_mel_bins": 16,
        "d_model": 24,
        "encoder_attention_heads": 2,
        "encoder_layers": 2,
        "encoder_ffn_dim": 40,
        "n_window": 50,
        "n_window_infer": 100,
        "max_source_positions": 20,
        "output_dim": 72,
        "downsample_hidden_size": 8,
        "conv_chunksize": 1,
    },
    sizes={"position_id_per_seconds": 13},
    token_id_keys={
        "image_token": "image_token_id",
        "video_token": "video_token_id",
        "audio_token": "audio_token_id",
        "vision_bos_token": "vision_start_token_id",
        "vision_eos_token": "vision_end_token_id",
        "audio_bos_token": "audio_start_token_id",
        "audio_eos_token": "audio_end_token_id",
    },
    clip_seconds=(1.3, 0.2, 0.3),
    audio_padding_seconds=2,
    guarded=(
        "rms_norm",
        "layer_norm",
        "glu_activation",
        "activation",
        "rope",
        "rope_vision",
        "causal_lm_loss",
        "moe_experts",
        "softmax_topk_router",
        "load_balancing_loss",
    ),
    router="Qwen3OmniMoeThinkerTextTopKRouter",
    top_level="Qwen3OmniMoeForConditionalGeneration",
    top_level_config_class=Qwen3OmniMoeConfig,
    speech={
        "talker": {
            "text_config": {
                "vocab_size": 64,
                "hidden_size": 32,
                "intermediate_size": 40,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "head_dim": 16,
                "moe_intermediate_size": 16,
                "shared_expert_intermediate_size": 24,
                "num_experts": 3,
                "num_experts_per_tok": 2,
            },
            "code_predictor_config": {
                "vocab_size": 64,
                "hidden_size": 32,
                "intermediate_size": 40,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "head_dim": 16,
                "num_code_groups": 2,
            },
            "num_code_groups": 2,
            "thinker_hidden_size": 72,
            # upstream's talker reads it from its own config (its get_rope_index)
            "spatial_merge_size": 2,
        },
        "code2wav": {
            "codebook_size": 64,
            "hidden_size": 32,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "intermediate_size": 40,
            "num_hidden_layers": 1,
            "num_quantizers": 2,
            "upsample_rates": [2, 2],
            "upsampling_ratios": [2],
            "decoder_dim": 16,
            "sliding_window": 8,
        },
    },
    refused={"generate": "generation", "enable_talker": "audio output"},
    speech_classes=(
        "Qwen3OmniMoeTalkerForConditionalGeneration",
        "Qwen3OmniMoeTalkerModel",
        "Qwen3OmniMoeTalkerDecoderLayer",
        "Qwen3OmniMoeTalkerTextSparseMoeBlock",
        "Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration",
        "Qwen3OmniMoeTalkerCodePredictorModel",
        "Qwen3OmniMoeCode2Wav",
        "Qwen3OmniMoeCode2WavTransformerModel",
        "Qwen3OmniMoeCode2WavDecoderBlock",
        "Qwen3OmniMoeSnakeBeta",
        "SnakeBeta",
    ),
)


class TestQwen3OmniMoeParity(OmniMoeParitySuite):
    model = QWEN3_OMNI_MOE


def test_no_split_modules_name_only_classes_the_module_defines() -> None:
    """Upstream's base class lists the talker's layers too; with the talker left out, the list loses them."""
    module = MODELING_REGISTRY.get_module("qwen3_omni_moe", "gpu")
    names = module.Qwen3OmniMoePreTrainedModel._no_split_modules
    assert names and [name for name in names if not hasattr(module, name)] == []


def test_tiny_config_mixes_sparse_and_dense_layers() -> None:
    model = build_model(QWEN3_OMNI_MOE.config(), architecture=QWEN3_OMNI_MOE.causal_lm)
    kinds = [type(layer.mlp).__name__ for layer in model.model.language_model.layers]
    assert kinds == [
        "Qwen3OmniMoeThinkerTextSparseMoeBlock",
        "Qwen3OmniMoeThinkerTextMLP",
        "Qwen3OmniMoeThinkerTextSparseMoeBlock",
    ]
