"""InternVL (VLM), GPU backend: op-slot guards read from upstream's structure.

Every norm, MLP and RoPE function upstream has is guarded. InternVLVisionRMSNorm is guarded by hand (the fit
leaves a norm that a config condition chooses to a hand-written config): the InternViT layers build it when the
config says ``norm_type="rms_norm"``, and tests/runtime/test_chosen_layer_norms.py checks both norm types.

InternVLModel builds self.vision_tower and self.language_model as the generated classes registered for its
sub-configs' model types (text_config: qwen2, vision_config: internvl_vision), through build_sub_model, and gets
dummy_forward; the loss head goes behind the causal_lm_loss slot.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, LossHead, Mlp, Norm, composed_vlm

config = PatchConfig(
    source_module="transformers.models.internvl.modeling_internvl",
    target_file="patched_modeling_internvl_gpu.py",
    description="InternVL with op-slot guards and slot-backed losses",
)
composed_vlm(
    config,
    prefix="InternVL",
    pretrained_models=("InternVLVisionPreTrainedModel",),
    norms=[Norm("InternVLVisionRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[Mlp("InternVLVisionMLP", kind="plain", act="activation_fn", activation="self.config.hidden_act")],
    call_sites=[
        CallSites("InternVLVisionLayer", chosen_layer_norms=("layernorm_before", "layernorm_after")),
        CallSites(
            "InternVLMultiModalProjector",
            layer_norms=("layer_norm",),
            activation="act",
            activation_config="projector_hidden_act",
        ),
    ],
    causal_lm=LossHead("InternVLForConditionalGeneration", softcap="", scale=()),
)
