"""GLM-ASR (audio language model), GPU backend: op-slot guards read from upstream's structure.

Every norm, MLP and RoPE function upstream has is guarded.

GlmAsrModel builds self.audio_tower and self.language_model as the generated classes registered for its sub-configs'
model types (audio_config: glmasr_encoder, text_config: llama), through build_sub_model, and gets dummy_forward on a
blank clip and the sequence-parallel forward; the loss head goes behind the causal_lm_loss slot.
Left as upstream's on purpose: torch's own layers and transformers' activation modules (the scaffold's module-tree
test holds every other module of a built model to this module's classes and its sub-models' generated ones).
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, LossHead, Mlp, Rope, composed_audio

config = PatchConfig(
    source_module="transformers.models.glmasr.modeling_glmasr",
    target_file="patched_modeling_glmasr_gpu.py",
    description="GLM-ASR with op-slot guards and slot-backed losses",
)
composed_audio(
    config,
    prefix="GlmAsr",
    mlps=[
        Mlp("GlmAsrMLP", kind="plain", act="act_fn", activation="self.activation_name", init_activation="hidden_act")
    ],
    call_sites=[
        CallSites("GlmAsrEncoderLayer", layer_norms=("input_layernorm", "post_attention_layernorm")),
        CallSites("GlmAsrMultiModalProjector", activation="act", activation_config="projector_hidden_act"),
    ],
    rope=Rope("apply_rotary_pos_emb", formulation="rotate_half_partial"),
    causal_lm=LossHead("GlmAsrForConditionalGeneration", softcap="", scale=()),
)
