"""MistralLarge4 (VLM + MoE), GPU backend: op-slot guards read from upstream's structure.

Left as upstream's code (no snippet covers them):

- rope: apply_rotary_pos_emb_interleave (line 148): apply_rotary_pos_emb_interleave (line 148) is the text
  attention's RoPE: not apply_rotary_pos_emb; replace it by hand to guard it (replace_function)

MistralLarge4Model builds self.vision_tower and self.language_model as the generated classes registered for its
sub-configs' model types (text_config: mistral_large4_text, vision_config: pixtral), through build_sub_model, and
gets dummy_forward; the loss head goes behind the causal_lm_loss slot.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, Experts, LossHead, Mlp, Norm, composed_vlm

config = PatchConfig(
    source_module="transformers.models.mistral_large4.modeling_mistral_large4",
    target_file="patched_modeling_mistral_large4_gpu.py",
    description="MistralLarge4 with op-slot guards and slot-backed losses",
)
composed_vlm(
    config,
    prefix="MistralLarge4",
    image_sizes=True,
    norms=[Norm("MistralLarge4RMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp(
            "MistralLarge4TextMLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
            whole=True,
        )
    ],
    call_sites=[
        CallSites("MistralLarge4MultiModalProjector", activation="act", activation_config="projector_hidden_act")
    ],
    causal_lm=LossHead("MistralLarge4ForConditionalGeneration", softcap="self.final_logit_softcapping", scale=()),
    experts=Experts("MistralLarge4TextMoE", activation="self.experts.config.hidden_act"),
    indexer="MistralLarge4TextIndexer",
)
