"""Pixtral's vision encoder: the generated modeling matches upstream transformers.

Pixtral packs every image of a batch into one sequence of patches, each image of its own size, with a
block-diagonal attention mask between them and 2-D RoPE positions restarting per image. The tiny batch therefore
gives the two images different sizes through ``image_sizes`` (28 x 28 and 21 x 14 pixels: 4 x 4 and 3 x 2 patches
of 7 pixels, the second image padded), so the packing, the mask and the per-image positions are those of a real
batch. ``pooled=False``: upstream's ``PixtralVisionModel`` returns no ``pooler_output``. The activation is
``gelu_pytorch_tanh``, neither Pixtral's default (exact GELU) nor llama's SiLU, so a guard that hard-codes the
activation's name shows.
"""

from transformers import PixtralVisionConfig

from modelgraft.models.testing.vision_encoder_suite import VisionEncoderModel, VisionEncoderParitySuite

PIXTRAL = VisionEncoderModel(
    model_type="pixtral",
    config_class=PixtralVisionConfig,
    architecture="PixtralVisionModel",
    guarded=("rms_norm", "glu_activation", "rope"),
    sizes={"hidden_act": "gelu_pytorch_tanh"},
    pooled=False,
    image_sizes=((28, 28), (21, 14)),
)


class TestPixtralVisionParity(VisionEncoderParitySuite):
    model = PIXTRAL
