"""Idefics3's vision encoder: the generated modeling matches upstream transformers.

Upstream's ``Idefics3VisionTransformer`` returns no ``pooler_output`` (``pooled=False``). The activation is exact
GELU instead of the default tanh approximation, so a guard that hard-codes the activation's name shows.
"""

from transformers import Idefics3VisionConfig

from modelgraft.models.testing.vision_encoder_suite import VisionEncoderModel, VisionEncoderParitySuite

IDEFICS3_VISION = VisionEncoderModel(
    model_type="idefics3_vision",
    config_class=Idefics3VisionConfig,
    architecture="Idefics3VisionTransformer",
    sizes={"hidden_act": "gelu"},
    pooled=False,
)


class TestIdefics3VisionParity(VisionEncoderParitySuite):
    model = IDEFICS3_VISION
