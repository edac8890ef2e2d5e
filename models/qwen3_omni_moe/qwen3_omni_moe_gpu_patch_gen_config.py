"""Qwen3-Omni-MoE (Omni + MoE, thinker only), GPU backend: the omni_moe recipe's guards on the thinker, the speech
side left out.

Kept: the thinker (the conditional-generation head over the thinker model, which holds the audio tower, the vision
tower with its DeepStack mergers and the MoE text decoder) and the top-level class, which builds the thinker alone.
Excluded: the talker (its MoE text model and its code predictor), the code2wav vocoder, and everything only they used
(their layers, RoPE, norms, output dataclasses), and the vocoder's deprecated SnakeBeta alias, which nothing uses.
The base class's _init_weights loses its branch for the vocoder's code offsets; the top-level class refuses
generation and audio output, and drops the speech side's keys (``talker.*``, ``code2wav.*``) from a checkpoint of the
whole model.

Guarded, as Qwen3-VL-MoE's: the text RMSNorms (decoder layers and the final norm, two classes upstream), the
dense text MLP of ``mlp_only_layers``, the vision MLP's activation (its name recorded in __init__), the vision
blocks' and the mergers' LayerNorm calls and the plain rotate-half RoPE of the text attention (the interleaved
sections are already in cos and sin), the vision RoPE in its (q, k, cos, sin) form, the thinker's logits and loss
with the aux-loss call (its output holds the router logits, as upstream's does in transformers 5.25); the routed
experts' call (their activation name recorded in __init__: the experts keep no config), the softmax-top-k router
with its ``norm_topk_prob``, and the expert-parallel plan. The audio tower as Qwen2.5-Omni's: its layers' two
LayerNorm calls and activation call, and its final LayerNorm call. Added: dummy_forward on both towers (the audio
clip's mel bins from the config: the first convolution is a one-channel Conv2d), the sequence-parallel forward of
the thinker model, and the picklable position-id function and collator step.

Left as upstream's on purpose (KEPT_UPSTREAM_MODULES): torch's own layers (the audio tower's three Conv2d, the
LayerNorms whose calls are guarded, the patch embedding's Conv3d, the mergers' nn.GELU inside a ModuleList loop,
the linears, embeddings, containers) and the activation modules the guarded MLPs and layers hold.
"""

from typing import TYPE_CHECKING

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import (
    AudioTower,
    CallSites,
    Experts,
    LossHead,
    Mlp,
    Norm,
    Rope,
    Router,
    VisionTower,
    omni_moe,
)
from modelgraft.generator.recipes.dense import apply_pretrained_model

# Names the patch bodies use, for readers and linters only: a patch body runs in the generated module,
# which has its own imports, and configs never import torch or transformers.
if TYPE_CHECKING:
    from transformers import initialization as init
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
        Qwen3OmniMoeThinkerTextSparseMoeBlock,
        SinusoidsPositionEmbedding,
    )

config = PatchConfig(
    source_module="transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe",
    target_file="patched_modeling_qwen3_omni_moe_gpu.py",
    description="Qwen3-Omni-MoE thinker with op-slot guards (text, vision, audio, experts, router), the fused-loss "
    "head with the aux loss, the expert-parallel plan and training helpers; the talker and code2wav left out",
)
omni_moe(
    config,
    prefix="Qwen3OmniMoe",
    vision=VisionTower("Qwen3OmniMoeVisionEncoder"),
    audio=AudioTower("Qwen3OmniMoeAudioEncoder", input_weight="self.conv2d1.weight", mel_bins="self.num_mel_bins"),
    speech_classes=(
        "{prefix}TalkerForConditionalGeneration",
        "{prefix}TalkerModel",
        "{prefix}TalkerCodePredictorModelForConditionalGeneration",
        "{prefix}TalkerCodePredictorModel",
        "{prefix}Code2Wav",
        "{prefix}Code2WavTransformerModel",
        "{prefix}Code2WavDecoderBlock",
        # the vocoder's deprecated alias, which nothing uses (so nothing else would take it out)
        "SnakeBeta",
    ),
    speech=("talker", "code2wav"),
    refused={"generate": "generation", "enable_talker": "audio output"},
    norms=[
        Norm(f"Qwen3OmniMoe{name}RMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")
        for name in ("ThinkerText", "Text")
    ],
    mlps=[
        Mlp("Qwen3OmniMoeThinkerTextMLP", kind="gated", activation="self.config.hidden_act"),
        Mlp(
            "Qwen3OmniMoeVisionMLP",
            kind="plain",
            act="act_fn",
            activation="self.activation_name",
            init_activation="hidden_act",
        ),
    ],
    call_sites=[
        CallSites("Qwen3OmniMoeVisionBlock", layer_norms=("norm1", "norm2")),
        CallSites("Qwen3OmniMoeVisionPatchMerger", layer_norms=("ln_q",)),
        CallSites("Qwen3OmniMoeAudioEncoder", layer_norms=("ln_post",)),
        CallSites(
            "Qwen3OmniMoeAudioEncoderLayer",
            layer_norms=("self_attn_layer_norm", "final_layer_norm"),
            activation="activation_fn",
            activation_config="activation_function",
        ),
    ],
    rope=Rope("apply_rotary_pos_emb", formulation="rotate_half"),
    causal_lm=LossHead("Qwen3OmniMoeThinkerForConditionalGeneration"),
    experts=Experts("Qwen3OmniMoeThinkerTextSparseMoeBlock", activation="self.experts.activation_name"),
    router=Router("Qwen3OmniMoeThinkerTextTopKRouter", kind="softmax_topk"),
)
# The thinker text model's own base class (upstream's public API, the talker's base) derives from PreTrainedModel,
# not from Qwen3OmniMoePreTrainedModel: it gets the same checkpoint conversions, strict loading and attention.
apply_pretrained_model(config, "{prefix}ThinkerTextPreTrainedModel", prefix="Qwen3OmniMoe")
config.apply_snippet(
    "activation_name_init",
    "Qwen3OmniMoeThinkerTextExperts",
    kind="modify_init",
    config_attr="hidden_act",
    description="record the experts' activation name for the moe_experts guard",
)


@config.override_method(
    "Qwen3OmniMoePreTrainedModel._init_weights",
    description="upstream's, less the branch of the excluded vocoder's code offsets",
)
def qwen3_omni_moe_init_weights(self, module):
    super()._init_weights(module)
    std = getattr(self.config, "initializer_range", 0.02)
    if isinstance(module, Qwen3OmniMoeThinkerTextSparseMoeBlock):
        init.normal_(module.experts.gate_up_proj, mean=0.0, std=std)
        init.normal_(module.experts.down_proj, mean=0.0, std=std)
        init.normal_(module.gate.weight, mean=0.0, std=std)
    elif isinstance(module, SinusoidsPositionEmbedding):
        position_embeddings = module.compute_default_singular_positional_embedding()
        init.copy_(module.positional_embedding, position_embeddings)


#: Modules of a built model that are not classes of the generated file, each left as upstream has it on
#: purpose (dotted class paths; the Omni suite's module-tree test holds the model to this list).
KEPT_UPSTREAM_MODULES = (
    "torch.nn.modules.container.ModuleList",
    "torch.nn.modules.conv.Conv2d",
    "torch.nn.modules.conv.Conv3d",
    "torch.nn.modules.linear.Linear",
    "torch.nn.modules.normalization.LayerNorm",
    "torch.nn.modules.sparse.Embedding",
    "torch.nn.modules.activation.GELU",
    "transformers.activations.GELUActivation",
    "transformers.activations.GELUTanh",
    "transformers.activations.SiLUActivation",
)
