"""CLIP's vision encoder: the generated modeling matches upstream transformers.

The tiny config uses exact GELU instead of the default ``quick_gelu``, so a guard that hard-codes the
activation's name shows; ``pooler_output`` is the class token through the guarded ``post_layernorm``.
"""

from transformers import CLIPVisionConfig

from modelgraft.models.testing.vision_encoder_suite import VisionEncoderModel, VisionEncoderParitySuite

CLIP = VisionEncoderModel(
    model_type="clip_vision_model",
    config_class=CLIPVisionConfig,
    architecture="CLIPVisionModel",
    sizes={"hidden_act": "gelu"},
)


class TestCLIPVisionParity(VisionEncoderParitySuite):
    model = CLIP
