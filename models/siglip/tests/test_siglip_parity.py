"""SigLIP's vision encoder: the generated modeling matches upstream transformers.

The tiny config keeps the attention-pooling head (``vision_use_head``), so ``pooler_output`` runs the head's
guarded LayerNorm and MLP, and uses exact GELU instead of the default tanh approximation, so a guard that
hard-codes the activation's name shows.
"""

from transformers import SiglipVisionConfig

from modelgraft.models.testing.vision_encoder_suite import VisionEncoderModel, VisionEncoderParitySuite

SIGLIP = VisionEncoderModel(
    model_type="siglip_vision_model",
    config_class=SiglipVisionConfig,
    architecture="SiglipVisionModel",
    sizes={"hidden_act": "gelu", "vision_use_head": True},
)


class TestSiglipVisionParity(VisionEncoderParitySuite):
    model = SIGLIP
