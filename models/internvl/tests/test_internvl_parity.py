"""InternVL: the generated modeling matches upstream transformers on images and text (the composed suite).

Its towers are the generated classes of their sub-configs' model types (qwen2, internvl_vision). The tiny sizes and
the processor's options are derived from InternVLConfig and InternVLProcessor themselves
(modelgraft.models.testing.scaffold_composed); the images go through the PIL image processor, and every slot the
built model consults is checked.
"""

from transformers import GotOcr2ImageProcessorPil, InternVLConfig, InternVLProcessor

from modelgraft.models.testing.scaffold_composed import ScaffoldComposedSuite, ScaffoldComposedVlm

INTERNVL = ScaffoldComposedVlm(
    model_type="internvl",
    config_class=InternVLConfig,
    processor_class=InternVLProcessor,
    image_processor_class=GotOcr2ImageProcessorPil,
    causal_lm="InternVLForConditionalGeneration",
    guarded=("activation", "layer_norm", "causal_lm_loss"),
)


class TestInternVLParity(ScaffoldComposedSuite):
    scaffold = INTERNVL
