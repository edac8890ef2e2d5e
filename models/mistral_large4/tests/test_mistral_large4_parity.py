"""MistralLarge4: the generated modeling matches upstream transformers on images and text (the composed suite).

Its towers are the generated classes of their sub-configs' model types (mistral_large4_text, pixtral). The tiny
sizes and the processor's options are derived from MistralLarge4Config and PixtralProcessor themselves
(modelgraft.models.testing.scaffold_composed); the images go through the PIL image processor, and every slot the
built model consults is checked.
"""

from transformers import MistralLarge4Config, PixtralImageProcessorPil, PixtralProcessor

from modelgraft.models.testing.scaffold_composed import ScaffoldComposedSuite, ScaffoldComposedVlm

MISTRAL_LARGE4 = ScaffoldComposedVlm(
    model_type="mistral_large4",
    config_class=MistralLarge4Config,
    processor_class=PixtralProcessor,
    image_processor_class=PixtralImageProcessorPil,
    causal_lm="MistralLarge4ForConditionalGeneration",
    guarded=("rms_norm", "gated_mlp", "activation", "moe_experts", "dsa_indexer", "causal_lm_loss"),
)


class TestMistralLarge4Parity(ScaffoldComposedSuite):
    scaffold = MISTRAL_LARGE4
