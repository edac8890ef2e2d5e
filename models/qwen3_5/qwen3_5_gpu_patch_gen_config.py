"""Qwen3.5 (hybrid linear attention, VLM), GPU backend: the hybrid recipe's guards on the Gated DeltaNet mixer,
the text decoder and the vision tower.

The mixer (``Qwen3_5GatedDeltaNet``) keeps upstream's module; its gated output norm, its causal conv1d (whole
and decode step) and its gated delta rule (chunked and recurrent) go behind their slots, and the four functions
are upstream's torch bodies without the hub decorator that binds an installed FLA or causal-conv1d at import
time (docs/snippets.md, "Hybrid linear attention: the `hybrid` recipe"). The rest is Qwen3-VL's, minus
DeepStack: the 1+weight RMSNorm (also the q/k norms) behind rms_norm with its offset, the gated MLP, the partial
rotate-half RoPE, the vision blocks' and the patch merger's LayerNorm calls, the merger's GELU and the vision
MLP's activation, the towers built as this module's classes, and the loss head of both the
conditional-generation class and the text-only ForCausalLM.

Left as upstream's on purpose (KEPT_UPSTREAM_MODULES): torch's own layers (the patch embedding's Conv3d, the
mixer's depthwise Conv1d whose weight the conv slots take, the linears, the embeddings, the LayerNorm and GELU
modules whose calls are guarded, containers) and the activation modules the guarded MLPs hold.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, LossHead, Mlp, Norm, Rope, VisionTower
from modelgraft.generator.recipes.hybrid import hybrid

config = PatchConfig(
    source_module="transformers.models.qwen3_5.modeling_qwen3_5",
    target_file="patched_modeling_qwen3_5_gpu.py",
    description="Qwen3.5 with op-slot guards (Gated DeltaNet, text and vision), its own towers, the fused-loss "
    "heads and training helpers",
)
hybrid(
    config,
    prefix="Qwen3_5",
    vision=VisionTower("Qwen3_5VisionModel"),
    norms=[Norm("Qwen3_5RMSNorm", formulation="rms_one_plus_weight", eps="eps", weight="weight")],
    mlps=[
        Mlp("Qwen3_5MLP", kind="gated", activation="self.config.hidden_act"),
        Mlp(
            "Qwen3_5VisionMLP",
            kind="plain",
            act="act_fn",
            activation="self.activation_name",
            init_activation="hidden_act",
        ),
    ],
    call_sites=[
        CallSites("Qwen3_5VisionBlock", layer_norms=("norm1", "norm2")),
        CallSites("Qwen3_5VisionPatchMerger", layer_norms=("norm",), activation="act_fn", activation_name="gelu"),
    ],
    rope=Rope("apply_rotary_pos_emb", formulation="rotate_half_partial"),
    mrope=None,
    causal_lm=LossHead("Qwen3_5ForConditionalGeneration"),
    towers={"vision_config": "Qwen3_5VisionModel", "text_config": "Qwen3_5TextModel"},
)

#: Modules of a built model that are not classes of the generated file, each left as upstream has it on
#: purpose (dotted class paths; the VLM suite's module-tree test holds the model to this list).
KEPT_UPSTREAM_MODULES = (
    "torch.nn.modules.container.ModuleList",
    "torch.nn.modules.conv.Conv1d",
    "torch.nn.modules.conv.Conv3d",
    "torch.nn.modules.linear.Linear",
    "torch.nn.modules.normalization.LayerNorm",
    "torch.nn.modules.sparse.Embedding",
    "torch.nn.modules.activation.GELU",
    "transformers.activations.GELUTanh",
    "transformers.activations.SiLUActivation",
)
