"""Qwen3.5-MoE (hybrid linear attention, VLM, MoE), GPU backend: Qwen3.5's guards plus the routed experts of its
text decoder.

The Gated DeltaNet mixer is a structural duplicate of Qwen3.5's (its gated norm class and the four module-level
functions are Qwen3.5's but the prefix), so its patches are Qwen3.5's own (models/qwen3_5), reused through
name_map: the gated norm, causal conv1d and gated delta rule behind their slots as upstream's torch bodies without
the hub decorator. The VLM side is applied by the same recipe pieces as Qwen3.5's, per model (its output
dataclasses carry the MoE fields, which a reused body would drop: the dataclass check rejects that): the 1+weight
RMSNorm, the partial rotate-half RoPE, the vision tower's guards and the towers built as
this module's classes. The MoE side is Qwen3-VL-MoE's (the vlm_moe recipe): the sparse block's call of its fused
experts behind moe_experts, the always-renormalising router behind softmax_topk_router, the shared expert's gated
MLP behind glu_activation (its sigmoid gate stays upstream's), the aux-loss call of both heads behind
load_balancing_loss and the expert-parallel plan of the text stack.

Left as upstream's on purpose (KEPT_UPSTREAM_MODULES): torch's own layers (the Conv3d and Conv1d, the linears, the
embeddings, the LayerNorm and GELU modules whose calls are guarded, containers) and the activation modules the
guarded MLPs and experts hold.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, Experts, LossHead, Mlp, Norm, Rope, Router, VisionTower
from modelgraft.generator.recipes.hybrid import hybrid_moe

from ..qwen3_5.qwen3_5_gpu_patch_gen_config import config as qwen3_5_config

config = PatchConfig(
    source_module="transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
    target_file="patched_modeling_qwen3_5_moe_gpu.py",
    description=(
        "Qwen3.5-MoE with op-slot guards (Gated DeltaNet, text, vision, experts, router), its own towers, the "
        "fused-loss heads with the aux loss, the expert-parallel plan and training helpers"
    ),
)
hybrid_moe(
    config,
    prefix="Qwen3_5Moe",
    mixer_from=qwen3_5_config,
    name_map={"Qwen3_5": "Qwen3_5Moe"},
    vision=VisionTower("Qwen3_5MoeVisionModel"),
    norms=[Norm("Qwen3_5MoeRMSNorm", formulation="rms_one_plus_weight", eps="eps", weight="weight")],
    mlps=[
        Mlp("Qwen3_5MoeMLP", kind="gated", activation="self.config.hidden_act"),
        Mlp(
            "Qwen3_5MoeVisionMLP",
            kind="plain",
            act="act_fn",
            activation="self.activation_name",
            init_activation="hidden_act",
        ),
    ],
    call_sites=[
        CallSites("Qwen3_5MoeVisionBlock", layer_norms=("norm1", "norm2")),
        CallSites("Qwen3_5MoeVisionPatchMerger", layer_norms=("norm",), activation="act_fn", activation_name="gelu"),
    ],
    rope=Rope("apply_rotary_pos_emb", formulation="rotate_half_partial"),
    causal_lm=LossHead("Qwen3_5MoeForConditionalGeneration"),
    towers={"vision_config": "Qwen3_5MoeVisionModel", "text_config": "Qwen3_5MoeTextModel"},
    experts=Experts("Qwen3_5MoeSparseMoeBlock", activation="self.experts.config.hidden_act"),
    router=Router("Qwen3_5MoeTopKRouter", kind="softmax_topk", always_renormalize=True),
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
