"""Qwen2.5-VL (VLM), GPU backend: the vlm recipe's guards on the text decoder and the vision tower.

Guarded: both norms' class (Qwen2_5_VLRMSNorm, in the decoder and in the vision blocks and merger), the decoder's
MLP (Qwen2MLP) and the vision blocks' gated MLP (Qwen2_5_VLMLP, which keeps no config: its activation name is
recorded in __init__), the text RoPE (the rotary embedding sections it by modality), the vision RoPE, and the conditional-generation head's
logits and loss. Added: the vision tower's dummy_forward and the picklable position-id function.

Left as upstream's on purpose (KEPT_UPSTREAM_MODULES): torch's own layers (the patch embedding's Conv3d, the
linears, the embedding, the merger's nn.Sequential with its nn.GELU, containers) and the activation module the
MLPs hold, which the glu_activation guard bypasses when a kernel is bound.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import LossHead, Mlp, Norm, Rope, VisionTower, vlm

config = PatchConfig(
    source_module="transformers.models.qwen2_5_vl.modeling_qwen2_5_vl",
    target_file="patched_modeling_qwen2_5_vl_gpu.py",
    description="Qwen2.5-VL with op-slot guards (text and vision), the fused-loss head and training helpers",
)
vlm(
    config,
    prefix="Qwen2_5_VL",
    vision=VisionTower("Qwen2_5_VisionTransformerPretrainedModel"),
    norms=[Norm("Qwen2_5_VLRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp("Qwen2MLP", kind="gated", activation="self.config.hidden_act"),
        Mlp("Qwen2_5_VLMLP", kind="gated", activation="self.activation_name", init_activation="hidden_act"),
    ],
    rope=Rope("apply_rotary_pos_emb", formulation="rotate_half"),
    causal_lm=LossHead("Qwen2_5_VLForConditionalGeneration"),
)

#: Modules of a built model that are not classes of the generated file, each left as upstream has it on
#: purpose (dotted class paths; the VLM suite's module-tree test holds the model to this list).
KEPT_UPSTREAM_MODULES = (
    "torch.nn.modules.container.ModuleList",
    "torch.nn.modules.container.Sequential",
    "torch.nn.modules.conv.Conv3d",
    "torch.nn.modules.linear.Linear",
    "torch.nn.modules.sparse.Embedding",
    "torch.nn.modules.activation.GELU",
    "transformers.activations.SiLUActivation",
)
