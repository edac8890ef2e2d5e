"""LlavaOnevision (VLM), GPU backend: op-slot guards read from upstream's structure.

Every norm, MLP and RoPE function upstream has is guarded.

LlavaOnevisionModel builds self.vision_tower and self.language_model as the generated classes registered for its
sub-configs' model types (text_config: qwen2, vision_config: siglip_vision_model), through build_sub_model, and gets
dummy_forward; the loss head goes behind the causal_lm_loss slot.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, LossHead, composed_vlm

config = PatchConfig(
    source_module="transformers.models.llava_onevision.modeling_llava_onevision",
    target_file="patched_modeling_llava_onevision_gpu.py",
    description="LlavaOnevision with op-slot guards and slot-backed losses",
)
composed_vlm(
    config,
    prefix="LlavaOnevision",
    image_tiles=True,
    placeholder_ids=("self.config.image_token_id", "self.config.video_token_id"),
    call_sites=[
        CallSites("LlavaOnevisionMultiModalProjector", activation="act", activation_config="projector_hidden_act")
    ],
    causal_lm=LossHead("LlavaOnevisionForConditionalGeneration", softcap="", scale=()),
)
