"""GLM-ASR: the generated modeling matches upstream transformers on audio clips and text (the audio suite).

Its towers are the generated classes of their sub-configs' model types (glmasr_encoder, llama). The tiny sizes, the
processor and the clips are derived from GlmAsrConfig and GlmAsrProcessor themselves
(modelgraft.models.testing.audio_lm_batches), and every slot the built model consults is checked.
"""

from transformers import GlmAsrConfig, GlmAsrProcessor

from modelgraft.models.testing.scaffold_audio_lm import ScaffoldAudioLm, ScaffoldAudioLmSuite

GLMASR = ScaffoldAudioLm(
    model_type="glmasr",
    config_class=GlmAsrConfig,
    processor_class=GlmAsrProcessor,
    causal_lm="GlmAsrForConditionalGeneration",
    guarded=("activation", "layer_norm", "rope", "causal_lm_loss"),
)


class TestGlmAsrParity(ScaffoldAudioLmSuite):
    scaffold = GLMASR
