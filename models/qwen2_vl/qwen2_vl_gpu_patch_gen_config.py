"""Qwen2-VL (VLM), GPU backend: the vlm recipe's guards on the text decoder and the vision tower.

Shared with Qwen2.5-VL through the recipe: the text RMSNorm and MLP, the text RoPE (the rotary embedding sections it by modality), the vision
RoPE, the conditional-generation head, dummy_forward and the position-id function. Qwen2-VL's own vision tower
has LayerNorms and a plain MLP instead: the vision blocks' and the patch merger's LayerNorm calls go behind the
layer_norm slot, the vision MLP's activation (quick_gelu) behind the activation slot, its name recorded in
__init__ (the module takes the name, not a config).

Left as upstream's on purpose (KEPT_UPSTREAM_MODULES): torch's own layers (the patch embedding's Conv3d, the
linears, the embedding, the LayerNorm modules whose calls are guarded, the merger's nn.Sequential with its
nn.GELU, containers) and the activation modules the guarded MLPs hold.
"""

from __future__ import annotations

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, LossHead, Mlp, Norm, Rope, VisionTower, vlm

config = PatchConfig(
    source_module="transformers.models.qwen2_vl.modeling_qwen2_vl",
    target_file="patched_modeling_qwen2_vl_gpu.py",
    description="Qwen2-VL with op-slot guards (text and vision), the fused-loss head and training helpers",
)
vlm(
    config,
    prefix="Qwen2VL",
    vision=VisionTower("Qwen2VisionTransformerPretrainedModel"),
    norms=[Norm("Qwen2VLRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp("Qwen2MLP", kind="gated", activation="self.config.hidden_act"),
        Mlp("VisionMlp", kind="plain", act="act", activation="self.activation_name"),
    ],
    call_sites=[
        CallSites("Qwen2VLVisionBlock", layer_norms=("norm1", "norm2")),
        CallSites("PatchMerger", layer_norms=("ln_q",)),
    ],
    rope=Rope("apply_rotary_pos_emb", formulation="rotate_half"),
    causal_lm=LossHead("Qwen2VLForConditionalGeneration"),
)


@config.modify_init("VisionMlp", description="record the activation's name for the slot guard")
def vision_mlp_init(self, dim: int, hidden_dim: int, hidden_act: str) -> None:
    # VisionMlp gets the activation's name, not a config, so the recipe's activation_name_init cannot read it.
    self.activation_name = hidden_act


#: Modules of a built model that are not classes of the generated file, each left as upstream has it on
#: purpose (dotted class paths; the VLM suite's module-tree test holds the model to this list).
KEPT_UPSTREAM_MODULES = (
    "torch.nn.modules.container.ModuleList",
    "torch.nn.modules.container.Sequential",
    "torch.nn.modules.conv.Conv3d",
    "torch.nn.modules.linear.Linear",
    "torch.nn.modules.normalization.LayerNorm",
    "torch.nn.modules.sparse.Embedding",
    "torch.nn.modules.activation.GELU",
    "transformers.activations.QuickGELUActivation",
    "transformers.activations.SiLUActivation",
)
