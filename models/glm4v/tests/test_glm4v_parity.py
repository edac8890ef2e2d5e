"""Glm4v: the generated modeling matches upstream transformers on images, videos and text (the VLM suite).

The tiny text and vision sizes and the special tokens are derived from Glm4vConfig and Glm4vProcessor
themselves (modelgraft.models.testing.scaffold_vlm), the images and the 2-frame videos go through the PIL image
processor, and the suite checks only the slots this scaffold guards.
"""

from transformers import Glm4vConfig, Glm4vImageProcessorPil, Glm4vProcessor

from modelgraft.models.testing.scaffold_vlm import ScaffoldVlm, ScaffoldVlmParitySuite

GLM4V = ScaffoldVlm(
    model_type="glm4v",
    config_class=Glm4vConfig,
    processor_class=Glm4vProcessor,
    image_processor_class=Glm4vImageProcessorPil,
    causal_lm="Glm4vForConditionalGeneration",
    base_model="Glm4vModel",
    patch_config="modelgraft.models.glm4v.glm4v_gpu_patch_gen_config",
    guarded=("rms_norm", "glu_activation", "layer_norm", "rope_vision", "causal_lm_loss"),
    separate_videos=True,
)


class TestGlm4vParity(ScaffoldVlmParitySuite):
    model = GLM4V
