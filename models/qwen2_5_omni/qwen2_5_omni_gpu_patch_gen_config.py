"""Qwen2.5-Omni (Omni, thinker only), GPU backend: the omni recipe's guards on the thinker, the speech side left out.

Kept: the thinker (the conditional-generation head over the thinker model, which holds the audio tower, the vision
tower and the text decoder) and the top-level class, which builds the thinker alone. Excluded: the talker, the
token2wav DiT and BigVGAN vocoder, and everything only they used (their output dataclass, layers, RoPE, filters), and
the vocoder's deprecated aliases (Activation1d, UpSample1d, DownSample1d, SnakeBeta, AMPBlock), which nothing uses.
The base class's _init_weights loses its two branches for the vocoder's resampling filters (a one-off patch: no
other model has them); the top-level class refuses generation and audio output, and drops the speech side's keys
from a checkpoint of the whole model.

Guarded: the RMSNorm class (text decoder, vision blocks, patch merger), the text MLP (Qwen2MLP) and the vision
blocks' gated MLP (Qwen2_5OmniMLP), neither of which keeps a config (activation names recorded in __init__), the
audio layers' two LayerNorm calls and activation call, the audio tower's final LayerNorm call, the text RoPE (sectioned
by the rotary embedding), the vision RoPE, and the thinker's logits and loss. Added: dummy_forward on both towers, the
sequence-parallel forward of the thinker model, and the picklable position-id function and collator step.

Left as upstream's on purpose (KEPT_UPSTREAM_MODULES): torch's own layers (the audio convolutions, average pool
and LayerNorms whose calls are guarded, the audio tower's final one included, the patch embedding's Conv3d, the
linears, embeddings, the merger's nn.Sequential with its nn.GELU, containers) and the activation modules the
guarded MLPs and audio layers hold.
"""

from typing import TYPE_CHECKING

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import AudioTower, CallSites, LossHead, Mlp, Norm, Rope, VisionTower, omni

# Names the patch bodies use, for readers and linters only: a patch body runs in the generated module,
# which has its own imports, and configs never import torch or transformers.
if TYPE_CHECKING:
    from transformers import initialization as init
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import SinusoidsPositionEmbedding

config = PatchConfig(
    source_module="transformers.models.qwen2_5_omni.modeling_qwen2_5_omni",
    target_file="patched_modeling_qwen2_5_omni_gpu.py",
    description="Qwen2.5-Omni thinker with op-slot guards (text, vision, audio), the fused-loss head and training "
    "helpers; the talker and token2wav left out",
)
omni(
    config,
    prefix="Qwen2_5Omni",
    vision=VisionTower("Qwen2_5OmniVisionEncoder"),
    audio=AudioTower("Qwen2_5OmniAudioEncoder"),
    speech_classes=(
        "{prefix}TalkerModel",
        "{prefix}TalkerForConditionalGeneration",
        "{prefix}Token2WavDiTModel",
        "{prefix}Token2WavBigVGANModel",
        "{prefix}Token2WavModel",
        # the vocoder's deprecated aliases, which nothing uses (so nothing else would take them out)
        "Activation1d",
        "UpSample1d",
        "DownSample1d",
        "SnakeBeta",
        "AMPBlock",
    ),
    norms=[Norm("Qwen2_5OmniRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp("Qwen2MLP", kind="gated", activation="self.activation_name", init_activation="hidden_act"),
        Mlp("Qwen2_5OmniMLP", kind="gated", activation="self.activation_name", init_activation="hidden_act"),
    ],
    call_sites=[
        CallSites(
            "Qwen2_5OmniAudioEncoderLayer",
            layer_norms=("self_attn_layer_norm", "final_layer_norm"),
            activation="activation_fn",
            activation_config="activation_function",
        ),
        CallSites("Qwen2_5OmniAudioEncoder", layer_norms=("ln_post",)),
    ],
    rope=Rope("apply_rotary_pos_emb", formulation="rotate_half"),
    causal_lm=LossHead("Qwen2_5OmniThinkerForConditionalGeneration"),
)


@config.override_method(
    "Qwen2_5OmniPreTrainedModel._init_weights",
    description="upstream's, less the branches of the excluded vocoder's resampling filters",
)
def qwen2_5_omni_init_weights(self, module):
    super()._init_weights(module)
    if isinstance(module, SinusoidsPositionEmbedding):
        position_embeddings = module.compute_default_singular_positional_embedding()
        init.copy_(module.positional_embedding, position_embeddings)


#: Modules of a built model that are not classes of the generated file, each left as upstream has it on
#: purpose (dotted class paths; the Omni suite's module-tree test holds the model to this list).
KEPT_UPSTREAM_MODULES = (
    "torch.nn.modules.container.ModuleList",
    "torch.nn.modules.container.Sequential",
    "torch.nn.modules.conv.Conv1d",
    "torch.nn.modules.conv.Conv3d",
    "torch.nn.modules.linear.Linear",
    "torch.nn.modules.normalization.LayerNorm",
    "torch.nn.modules.pooling.AvgPool1d",
    "torch.nn.modules.sparse.Embedding",
    "torch.nn.modules.activation.GELU",
    "transformers.activations.GELUActivation",
    "transformers.activations.SiLUActivation",
)
