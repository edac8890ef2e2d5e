"""The pieces a recipe guards, one small record each: which upstream class, and what its slot call needs.

A config states every decision about a model here (which norm formulation, which activation, which
soft-cap), so a reviewer reads them in the config; mechanical facts (parameter names, the arguments
upstream passes to its lm_head and loss) are read from upstream by the snippets themselves.
``{prefix}`` in a class name is replaced by the recipe's ``prefix``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Norm:
    """An RMSNorm class whose forward goes behind the rms_norm slot.

    ``formulation`` is "rms_weight" (llama: cast, then scale), "rms_one_plus_weight" (gemma: scale by
    ``1 + weight`` in fp32, then cast) or "rms_weight_cast_last" (olmo2: scale in fp32, then cast);
    ``eps`` and ``weight`` name the attributes holding them.
    """

    cls: str = "{prefix}RMSNorm"
    formulation: str = "rms_weight"
    eps: str = "variance_epsilon"
    weight: str = "weight"


@dataclass(frozen=True)
class Mlp:
    """An MLP class whose activation goes behind a slot.

    ``kind`` is "gated" (separate gate and up projections, glu_activation slot), "fused_gate_up" (one
    ``gate`` projection chunked into gate and up, glu_activation slot) or "plain" (``down(act(up(x)))``,
    the activation module ``act`` behind the activation slot). ``activation`` is an expression naming the
    activation inside forward; for a module that keeps no config, ``init_activation`` names the config
    attribute its ``__init__`` records as ``self.activation_name`` (then ``activation`` is that).
    ``whole`` (gated kind only) puts the whole MLP, its three projections and the activation, behind the
    gated_mlp slot instead of only its activation behind glu_activation: for MLPs a kernel should replace
    as one unit, such as the shared experts of a MoE block (DeepSeek-V3), which run beside the routed ones.
    """

    cls: str = "{prefix}MLP"
    kind: str = "gated"
    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"
    activation: str = "self.config.hidden_act"
    act: str = "act_fn"
    init_activation: str = ""
    whole: bool = False


@dataclass(frozen=True)
class LossHead:
    """The causal LM whose logits and loss go behind the causal_lm_loss slot.

    ``softcap`` is the expression of the final-logit soft-cap upstream applies ("" for none), and
    ``softcap_fp32`` says upstream upcasts the logits to fp32 before it (so its logits come out fp32);
    ``logits_fp32`` that upstream upcasts them on the head call with no soft-cap (mllama's
    ``self.lm_head(h).float()``), so the guard returns the kernel's logits in fp32 too; ``scale``
    is ("div" | "mul", expression) when upstream scales the logits before the loss, else (); ``head`` is the
    output projection's attribute and ``bias`` says it has a bias (handed to the kernel as lm_head_bias).
    ``router_logits`` is (output class, expression) where upstream builds its MoE output without the router
    logits it has (Qwen3-Omni-MoE's thinker): the generated forward passes ``router_logits=<expression>``.
    """

    cls: str = "{prefix}ForCausalLM"
    softcap: str = ""
    softcap_fp32: bool = False
    logits_fp32: bool = False
    scale: tuple[str, ...] = ()
    head: str = "lm_head"
    bias: bool = False
    router_logits: tuple[str, ...] = ()


@dataclass(frozen=True)
class Experts:
    """The sparse MoE block whose routed-experts call goes behind the moe_experts slot, and the experts' layout.

    The defaults are qwen3_moe's: ``[E, 2I, H]`` gate-first, no biases, ``ACT(gate) * up``. The other
    fields are the slot's keyword options, passed only when they differ from these defaults:
    ``layout`` "transposed" for ``[E, H, 2I]`` weights applied as ``x @ W[e]``, ``interleaved`` for gate/up
    in alternating columns, ``gate_up_bias`` / ``down_bias`` the experts' bias attributes, and ``limit`` /
    ``alpha`` expressions (inside the sparse block's forward) of the clamped SwiGLU's constants;
    ``activation_first``: the limit clamps the activated gate (Step-3.7's unit), not the gate.
    """

    sparse_block: str = "{prefix}SparseMoeBlock"
    activation: str = "self.experts.config.hidden_act"
    layout: str = "fused"
    interleaved: bool = False
    gate_up_bias: str = ""
    down_bias: str = ""
    limit: str = ""
    alpha: str = ""
    activation_first: bool = False


@dataclass(frozen=True)
class Router:
    """A MoE router class whose forward goes behind a routing slot, and the attributes that slot reads.

    ``kind`` names the slot, ``<kind>_router_slot``, each for one router body the upstream reader
    recognises exactly: "group_limited" is the sigmoid router with a correction bias and group-limited
    top-k (the reader's ``sigmoid_group_limited``: DeepSeek-V3, GLM-4.5-MoE, GLM-MoE-DSA, ...);
    "softmax_topk" the fp32 softmax, top-k and optional renormalisation of Qwen3-MoE (its ``softmax_topk``
    with the roles bound: Qwen2-MoE, OLMoE, ...); "topk_softmax" gpt_oss's biased logits, top-k, then a
    softmax over the k values. The other fields name the router's attributes for the slot's arguments
    (:data:`ROUTER_ROLES` says which a kind reads); the defaults are the names every such router upstream uses.

    ``upcast``, ``cast_back`` and ``always_renormalize`` are softmax_topk's variants (:data:`ROUTER_OPTIONS`),
    as the reader found them: Mixtral/MiniMax upcast with ``.float()``, keep fp32 weights and always
    renormalise; Qwen3.5-MoE/Qwen3-VL-MoE only always renormalise (then ``norm_topk_prob`` is not read). The
    defaults are Qwen3-MoE's body, and the snippet hands the slot only the options that differ from them.
    """

    cls: str = "{prefix}TopkRouter"
    kind: str = "group_limited"
    weight: str = "weight"
    bias: str = "bias"
    top_k: str = "top_k"
    n_group: str = "num_group"
    topk_group: str = "topk_group"
    norm_topk_prob: str = "norm_topk_prob"
    routed_scaling_factor: str = "routed_scaling_factor"
    upcast: str = "dtype_arg"
    cast_back: bool = True
    always_renormalize: bool = False


#: The Router fields each kind hands its slot, in the slot's argument order: the roles the reader binds.
ROUTER_ROLES: dict[str, tuple[str, ...]] = {
    "group_limited": ("weight", "top_k", "n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor"),
    "softmax_topk": ("weight", "top_k", "norm_topk_prob"),
    "topk_softmax": ("weight", "bias", "top_k"),
}

#: The Router fields that are options of a kind's slot rather than attributes of the router: handed to the
#: snippet only when they differ from the Router default, so a router with the default body renders as before.
ROUTER_OPTIONS: dict[str, tuple[str, ...]] = {
    "group_limited": (),
    "softmax_topk": ("upcast", "cast_back", "always_renormalize"),
    "topk_softmax": (),
}


def router_roles(kind: str, options: Mapping[str, Any]) -> tuple[str, ...]:
    """The roles a router of ``kind`` with these options reads from its attributes.

    A softmax-top-k router that always renormalises has no flag to read, so ``norm_topk_prob`` drops out.
    """
    roles = ROUTER_ROLES[kind]
    if options.get("always_renormalize"):
        roles = tuple(role for role in roles if role != "norm_topk_prob")
    return roles


@dataclass(frozen=True)
class Rope:
    """The module-level RoPE function behind the rope slot, and which of upstream's formulations it has.

    ``formulation`` names upstream's body (see ``RopeInfo`` in generator/upstream/structure.py): the slot
    is told the options that recompute it (interleaved pairs, repeated cos/sin, fp32 rotation, cast back).
    """

    function: str = "apply_rotary_pos_emb"
    formulation: str = "rotate_half"


@dataclass(frozen=True)
class CallSites:
    """A class whose forward calls torch modules directly: each ``nn.LayerNorm`` attribute in
    ``layer_norms`` goes behind the layer_norm slot, and the ``ACT2FN`` module in ``activation`` behind
    the activation slot, its name recorded in ``__init__`` from ``config.<activation_config>`` or, for a
    torch activation module (``nn.GELU``), given as ``activation_name`` (the ACT2FN name computing the same).
    ``chosen_layer_norms``: attributes whose module a config switch chooses, ``nn.LayerNorm`` among the choices
    (InternViT's ``NORM2FN[config.norm_type]``): behind the layer_norm slot only while the module is one.
    """

    cls: str
    layer_norms: tuple[str, ...] = ()
    chosen_layer_norms: tuple[str, ...] = ()
    activation: str = ""
    activation_config: str = ""
    activation_name: str = ""
