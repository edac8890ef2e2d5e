"""Qwen3-VL (VLM), GPU backend: the vlm recipe's guards on the text decoder and the vision tower.

Shared with the Qwen2-VL family through the recipe: the vision RoPE, the conditional-generation head,
dummy_forward (its sum covers the DeepStack features too) and the position-id function. Qwen3-VL's own parts: the
text decoder's plain rotate-half RoPE (the sections are interleaved into cos and sin by its rotary embedding, so
the rope slot gets the finished ones), the text RMSNorm (also the q/k norms) and gated MLP, the vision blocks' and
the patch mergers' LayerNorm calls, the mergers' GELU module and the vision MLP's activation.

Qwen3VLModel builds its towers with AutoModel.from_config, which would be upstream's classes: the recipe's
``towers`` rewrites those two calls to this module's vision and text models, so the guards above run.

Left as upstream's on purpose (KEPT_UPSTREAM_MODULES): torch's own layers (the patch embedding's Conv3d, the
linears, the embeddings, the LayerNorm and GELU modules whose calls are guarded, containers) and the activation
modules the guarded MLPs hold.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, LossHead, Mlp, Norm, Rope, VisionTower, vlm

config = PatchConfig(
    source_module="transformers.models.qwen3_vl.modeling_qwen3_vl",
    target_file="patched_modeling_qwen3_vl_gpu.py",
    description="Qwen3-VL with op-slot guards (text and vision), its own towers, the fused-loss head and training helpers",
)
vlm(
    config,
    prefix="Qwen3VL",
    vision=VisionTower("Qwen3VLVisionModel"),
    norms=[Norm("Qwen3VLTextRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp("Qwen3VLTextMLP", kind="gated", activation="self.config.hidden_act"),
        Mlp(
            "Qwen3VLVisionMLP",
            kind="plain",
            act="act_fn",
            activation="self.activation_name",
            init_activation="hidden_act",
        ),
    ],
    call_sites=[
        CallSites("Qwen3VLVisionBlock", layer_norms=("norm1", "norm2")),
        CallSites("Qwen3VLVisionPatchMerger", layer_norms=("norm",), activation="act_fn", activation_name="gelu"),
    ],
    rope=Rope("apply_rotary_pos_emb", formulation="rotate_half"),
    mrope=None,
    causal_lm=LossHead("Qwen3VLForConditionalGeneration"),
    towers={"vision_config": "Qwen3VLVisionModel", "text_config": "Qwen3VLTextModel"},
)

#: Modules of a built model that are not classes of the generated file, each left as upstream has it on
#: purpose (dotted class paths; the VLM suite's module-tree test holds the model to this list).
KEPT_UPSTREAM_MODULES = (
    "torch.nn.modules.container.ModuleList",
    "torch.nn.modules.conv.Conv3d",
    "torch.nn.modules.linear.Linear",
    "torch.nn.modules.normalization.LayerNorm",
    "torch.nn.modules.sparse.Embedding",
    "torch.nn.modules.activation.GELU",
    "transformers.activations.GELUTanh",
    "transformers.activations.SiLUActivation",
)
