"""LlavaOnevision: the generated modeling matches upstream transformers on images and text (the composed suite).

Its towers are the generated classes of their sub-configs' model types (qwen2, siglip_vision_model). The tiny sizes
and the processor's options are derived from LlavaOnevisionConfig and LlavaOnevisionProcessor themselves
(modelgraft.models.testing.scaffold_composed); the images go through the PIL image processor, and every slot the
built model consults is checked.
"""

from transformers import LlavaOnevisionConfig, LlavaOnevisionImageProcessorPil, LlavaOnevisionProcessor

from modelgraft.models.testing.scaffold_composed import ScaffoldComposedSuite, ScaffoldComposedVlm

LLAVA_ONEVISION = ScaffoldComposedVlm(
    model_type="llava_onevision",
    config_class=LlavaOnevisionConfig,
    processor_class=LlavaOnevisionProcessor,
    image_processor_class=LlavaOnevisionImageProcessorPil,
    causal_lm="LlavaOnevisionForConditionalGeneration",
    guarded=("activation", "causal_lm_loss"),
)


class TestLlavaOnevisionParity(ScaffoldComposedSuite):
    scaffold = LLAVA_ONEVISION
