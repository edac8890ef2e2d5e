"""Qwen3-VL-MoE (VLM + MoE), GPU backend: Qwen3-VL's guards on both towers plus the routed experts of its text decoder.

The VLM side is Qwen3-VL's (the vlm recipe with the same parts): the towers built from this module's classes
instead of AutoModel.from_config, the text decoder's plain rotate-half RoPE, RMSNorm and dense gated MLP, the vision
blocks' and patch mergers' LayerNorm and GELU calls, the vision RoPE, the fused-loss head reading
``text_config``'s vocabulary, dummy_forward and the position-id function.

The MoE side is Qwen3-MoE's: the sparse block's call of its fused experts (``gate_up_proj [E, 2I, H]``,
``down_proj [E, H, I]``, as the modeling holds them) behind moe_experts, the router behind
softmax_topk_router (this router always renormalises its top-k weights: it has no ``norm_topk_prob``),
upstream's aux-loss call behind load_balancing_loss, and the expert-parallel plan of the text stack.

Left as upstream's on purpose (KEPT_UPSTREAM_MODULES): torch's own layers (the patch embedding's Conv3d, the
linears, the embeddings, the LayerNorm and GELU modules whose calls are guarded, containers) and the activation
modules the guarded MLPs and experts hold.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, Experts, LossHead, Mlp, Norm, Rope, Router, VisionTower, vlm_moe

config = PatchConfig(
    source_module="transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe",
    target_file="patched_modeling_qwen3_vl_moe_gpu.py",
    description=(
        "Qwen3-VL-MoE with op-slot guards (text, vision, experts, router), its own towers, the fused-loss head "
        "with the aux loss, the expert-parallel plan and training helpers"
    ),
)
vlm_moe(
    config,
    prefix="Qwen3VLMoe",
    vision=VisionTower("Qwen3VLMoeVisionModel"),
    norms=[Norm("Qwen3VLMoeTextRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp("Qwen3VLMoeTextMLP", kind="gated", activation="self.config.hidden_act"),
        Mlp(
            "Qwen3VLMoeVisionMLP",
            kind="plain",
            act="act_fn",
            activation="self.activation_name",
            init_activation="hidden_act",
        ),
    ],
    call_sites=[
        CallSites("Qwen3VLMoeVisionBlock", layer_norms=("norm1", "norm2")),
        CallSites("Qwen3VLMoeVisionPatchMerger", layer_norms=("norm",), activation="act_fn", activation_name="gelu"),
    ],
    rope=Rope("apply_rotary_pos_emb", formulation="rotate_half"),
    causal_lm=LossHead("Qwen3VLMoeForConditionalGeneration"),
    towers={"vision_config": "Qwen3VLMoeVisionModel", "text_config": "Qwen3VLMoeTextModel"},
    experts=Experts("Qwen3VLMoeTextSparseMoeBlock", activation="self.experts.config.hidden_act"),
    router=Router("Qwen3VLMoeTextTopKRouter", kind="softmax_topk", always_renormalize=True),
    aux_loss="load_balancing_loss_func",
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
