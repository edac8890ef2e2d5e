"""Which recipe call a model's upstream structure calls for, or why no scaffold can be made for it.

The scaffolder reads, it does not ask: :func:`fit_model` turns the reader's report
(:class:`modelgraft.generator.upstream.structure.ModelStructure`) into the recipe arguments a config passes
(recorded as Copier answers, rendered as an explicit call), the slots the result guards, what stays
upstream's code and why, and the structures that make a scaffold impossible. A guard is planned only
for a formulation the reader recognised exactly, so a scaffold never computes something else than
upstream; what no snippet covers is skipped with its reason, and a model whose scaffold would guard
less than its loss head and two slots is refused, as is one whose loss head no snippet fits.

A category answer is checked against the structure, never trusted over it: an answer that contradicts
the category upstream's structure shows (any pair, including categories without a scaffold) is
refused with what was detected, so a wrong answer cannot give a model that looks done and is not (a
package with a tower whose causal LM is a text model of its own may be answered as that text model). A
refusal names the patches a hand-written config would apply, or says that none can be named.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from modelgraft.generator import categories
from modelgraft.generator.categories import OUT_OF_CATEGORY
from modelgraft.generator.recipes.causal_lm_path import (
    causal_lm_is_public,
    text_model_alone,
    text_model_classes,
    towers_on_causal_lm_path,
)
from modelgraft.generator.recipes.fit_audio_lm import audio_lm_arguments, audio_lm_processors
from modelgraft.generator.recipes.fit_composed import composed_arguments, text_layers
from modelgraft.generator.recipes.fit_omni import omni_arguments, omni_processors
from modelgraft.generator.recipes.fit_vlm import (
    VlmFinding,
    multimodal_rope_name,
    text_rope_is_plain,
    vlm_arguments,
    vlm_processors,
)
from modelgraft.generator.recipes.hand_patches import hand_written_patches
from modelgraft.generator.recipes.parts import ROUTER_OPTIONS, Router, router_roles
from modelgraft.generator.upstream.structure import GatedDeltaNetInfo, MlpInfo, ModelStructure, ShortConvolutionInfo

DOCS = "docs/adding-a-model.md#hand-written-patches"

#: ACT2FN activations with learned parameters: a kernel told only the name would compute with fresh ones.
PARAMETRIZED_ACTIVATIONS = ("xielu",)


@dataclass(frozen=True)
class Finding:
    """A structure of upstream that the scaffold leaves as it is (skipped) or cannot handle (refusal)."""

    #: "norm", "mlp", "rope", "causal_lm", "sequence_classification", "experts", "coverage", "category",
    #: "category answer" (an answered category that contradicts the detected one)
    structure: str
    where: str  # the upstream class or function
    line: int
    reason: str
    remedy: str = ""

    def describe(self) -> str:
        place = f"{self.where} (line {self.line})" if self.line else self.where
        text = f"{self.structure}: {place}: {self.reason}"
        return f"{text}; {self.remedy}" if self.remedy else text


@dataclass(frozen=True)
class Fit:
    structure: ModelStructure
    category: str
    #: Recipe arguments as plain data (Copier answers): see :func:`recipe_call`.
    arguments: dict[str, Any] = field(default_factory=dict)
    guarded: tuple[str, ...] = ()
    skipped: tuple[Finding, ...] = ()
    refusals: tuple[Finding, ...] = ()
    #: For a refusal: the patches a hand-written config would apply (:func:`hand_written_patches`).
    hand_patches: tuple[str, ...] = ()
    #: For a refusal where no patch can be named: why not.
    no_patches_because: str = ""
    #: For a VLM: the processor class and the PIL image processor the scaffold's tests build
    #: (``processor``, ``image_processor``); empty for the other categories.
    processors: dict[str, str] = field(default_factory=dict)
    #: For a refused VLM or Omni model whose package's causal LM builds no tower (llama4's ``Llama4ForCausalLM``):
    #: that class, and the text category that scaffolds it alone, when its fit holds; else empty.
    text_answer: tuple[str, str] = ()

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    @property
    def answer_only(self) -> bool:
        """Refused only because the category answer contradicts upstream: the detected one has a scaffold."""
        return bool(self.refusals) and all(finding.structure == "category answer" for finding in self.refusals)

    def refusal_message(self) -> str:
        """What a user reads when the copy stops before writing anything: each cause, then the way on."""
        model = self.structure.model
        if self.answer_only:
            lines = [f"no {self.category} scaffold for {model}: the category answer contradicts upstream"]
        else:
            lines = [f"no scaffold for {model}: upstream has structures no snippet handles"]
        lines += [f"  - {finding.describe()}" for finding in self.refusals]
        if self.answer_only:
            detected = self.structure.category
            lines.append(f"Answer the detected category, {detected}: the default (drop -d category={self.category}).")
        elif self.hand_patches:
            named = any(finding.remedy for finding in self.refusals)
            also = ", with the patches named above" if named else ""
            lines.append(f"Write the config by hand ({DOCS}){also}; it would apply:")
            lines += [f"  - {patch}" for patch in self.hand_patches]
        elif any(finding.remedy for finding in self.refusals):
            lines.append(f"Write the config by hand with the patches named above ({DOCS}).")
        else:
            why = self.no_patches_because or "the reader recognised no structure a snippet guards"
            lines.append(f"No patch can be named for a hand-written config: {why} ({DOCS}).")
        if self.text_answer:
            causal_lm, answer = self.text_answer
            lines.append(
                f"Its causal LM {causal_lm} builds no tower: -d category={answer} scaffolds that text model alone "
                '(docs/scaffolding.md, "Overriding a decision").'
            )
        return "\n".join(lines)


def _unused(structure: ModelStructure, cls: str, line: int, what: str, skipped: list[Finding]) -> bool:
    """A class upstream defines but never instantiates: guarding it would be a guard no model reaches."""
    if structure.instantiated and cls not in structure.instantiated:
        skipped.append(Finding(what, cls, line, "defined upstream but never instantiated by the model"))
        return True
    return False


def _norm(structure: ModelStructure, skipped: list[Finding]) -> list[dict[str, str]]:
    guarded = []
    for norm in structure.norms:
        if _unused(structure, norm.cls, norm.line, "norm", skipped):
            continue
        if norm.cls in structure.conditional:
            # A norm chosen by a config switch (cohere2_moe: RMSNorm only when rms_norm_eps is set): which one
            # a checkpoint uses is not upstream's to say, and a test config may never reach the guard.
            reason = "instantiated only under a config condition; guard it by hand for the configs that use it"
            skipped.append(Finding("norm", norm.cls, norm.line, reason))
            continue
        guardable = ("rms_weight", "rms_one_plus_weight", "rms_weight_cast_last")
        if norm.kind in guardable and norm.param and norm.eps_attr and norm.weight_attr:
            guarded.append(
                {"cls": norm.cls, "formulation": norm.kind, "eps": norm.eps_attr, "weight": norm.weight_attr}
            )
            continue
        if norm.kind == "rms_unweighted" and norm.param and norm.eps_attr:
            guarded.append({"cls": norm.cls, "formulation": norm.kind, "eps": norm.eps_attr, "weight": ""})
            continue
        reason = {
            "layer_norm": "a LayerNorm; there is no layer_norm slot yet",
        }.get(norm.kind, norm.reason or "a formulation the reader does not recognise")
        skipped.append(
            Finding("norm", norm.cls, norm.line, reason, "override its forward by hand to guard it (override_method)")
        )
    return guarded


def _mlps(structure: ModelStructure, skipped: list[Finding]) -> list[dict[str, str]]:
    guarded = []
    for mlp in structure.mlps:
        if _unused(structure, mlp.cls, mlp.line, "mlp", skipped):
            continue
        if mlp.kind not in ("gated", "fused_gate_up", "plain"):
            reason = mlp.reason or "a forward the reader does not recognise"
            skipped.append(Finding("mlp", mlp.cls, mlp.line, reason, "override its forward by hand to guard it"))
            continue
        activation, init_activation = mlp.activation_expr, ""
        default = structure.config_defaults.get(mlp.activation_config_attr or "", "").strip("'\"")
        if default in PARAMETRIZED_ACTIVATIONS:
            reason = f"its activation ({default}) has learned parameters, which a slot told only its name cannot use"
            skipped.append(Finding("mlp", mlp.cls, mlp.line, reason))
            continue
        if not activation and mlp.activation_config_attr:
            activation, init_activation = "self.activation_name", mlp.activation_config_attr
        complete = {
            "gated": mlp.gate_attr and mlp.up_attr and mlp.down_attr,
            "fused_gate_up": mlp.gate_attr and mlp.down_attr,
            "plain": mlp.act_attr,
        }[mlp.kind]
        if not activation or not complete:
            reason = (
                "names its activation nowhere the forward can reach (no config attribute read in __init__)"
                if not activation
                else "its projections or activation module were not all found"
            )
            skipped.append(Finding("mlp", mlp.cls, mlp.line, reason, "override its forward by hand to guard it"))
            continue
        fields = {
            "cls": mlp.cls,
            "kind": mlp.kind,
            "gate": mlp.gate_attr or "",
            "up": mlp.up_attr or "",
            "down": mlp.down_attr or "",
            "activation": activation,
            "act": mlp.act_attr or "",
            "init_activation": init_activation,
        }
        if _whole_shared_experts(structure, mlp):
            fields["whole"] = True
        guarded.append(fields)
    return guarded


def _whole_shared_experts(structure: ModelStructure, mlp: MlpInfo) -> bool:
    """The MLP is a MoE block's shared experts and can go behind gated_mlp_slot as a whole.

    Only for the gated formulation the reader matched exactly, ending in its down projection (no residual
    dropout after it), whose three projections are plain ``nn.Linear`` modules: the slot recomputes the MLP
    from their weights and biases, which is then exactly what upstream computes.
    """
    shared = structure.moe.shared_experts if structure.moe else None
    if shared is None or shared.cls != mlp.cls or mlp.kind != "gated" or mlp.residual_dropout:
        return False
    projections = (mlp.gate_attr, mlp.up_attr, mlp.down_attr)
    return all(projection in shared.linear_attrs for projection in projections)


def _call_sites(structure: ModelStructure) -> list[dict[str, Any]]:
    """Classes that call nn.LayerNorm / ACT2FN modules in their own forward (old decoders: opt, gpt_neo, bloom)."""
    sites = []
    for site in structure.call_sites:
        if site.cls in structure.conditional:
            continue
        sites.append(
            {
                "cls": site.cls,
                "layer_norms": list(site.layer_norms),
                "chosen_layer_norms": list(site.chosen_layer_norms),
                "activation": site.activation or "",
                "activation_config": site.activation_config_attr or "",
                "activation_name": site.activation_name or "",
            }
        )
    return sites


def _without_indexer_sites(
    sites: list[dict[str, Any]], structure: ModelStructure, skipped: list[Finding]
) -> list[dict[str, Any]]:
    """The call sites less the DSA indexer's: its forward goes behind ``dsa_indexer_guard``, and a target takes
    one patch, so the indexer's own module calls (DeepSeek-V3.2's key LayerNorm) stay upstream's code."""
    indexer = structure.dsa_indexer
    kept = [site for site in sites if site["cls"] != indexer]
    if len(kept) != len(sites):
        line = next((site.line for site in structure.call_sites if site.cls == indexer), 0)
        reason = "its forward goes behind dsa_indexer_guard, and a target takes one patch: its module calls stay"
        skipped.append(Finding("call_sites", indexer or "", line, reason))
    return kept


def _rope(structure: ModelStructure, skipped: list[Finding]) -> str | dict[str, str] | None:
    rope = structure.rope
    if structure.vlm is not None and multimodal_rope_name(structure):
        return None  # the vlm recipe's mrope guard takes it (vlm_arguments)
    if structure.vlm is not None and text_rope_is_plain(structure) and rope is not None:
        # A VLM's text RoPE next to the tower's apply_rotary_pos_emb_vision: the tower's goes behind
        # rope_vision (vlm_arguments), so the text one is guarded as a dense model's.
        rope = replace(rope, reason="")
    if rope is None or rope.kind == "none":
        skipped.append(Finding("rope", "-", 0, (rope.reason if rope else "") or "no rotary embedding function"))
        return None
    if rope.kind == "function" and rope.formulation != "unknown" and "unsqueeze_dim" in rope.params:
        if not rope.reason:
            if rope.formulation == "rotate_half":
                return rope.name
            return {"function": rope.name, "formulation": rope.formulation}
        # The model may run another RoPE function (deepseek's interleaved one): guarding only this one would
        # leave the default path unguarded while the scaffold claims a rope slot.
        skipped.append(Finding("rope", rope.name or "-", rope.line, rope.reason.removeprefix("note: ")))
        return None
    where = f"{rope.owner}.{rope.name}" if rope.owner else (rope.name or "-")
    reason = rope.reason or (
        "a method, not a module-level function" if rope.kind == "method" else "takes no unsqueeze_dim"
    )
    skipped.append(Finding("rope", where, rope.line, reason, "replace it by hand to guard it (replace_function)"))
    return None


def _causal_lm(structure: ModelStructure, refusals: list[Finding]) -> dict[str, Any] | None:
    head = structure.causal_lm
    if head is None:
        refusals.append(Finding("causal_lm", f"{structure.prefix}ForCausalLM", 0, "upstream has no causal LM"))
        return None
    remedy = "override its forward by hand with the loss behind causal_lm_loss_slot"
    if head.reason:
        refusals.append(Finding("causal_lm", head.cls, head.line, head.reason, remedy))
        return None
    softcap, scale, softcap_fp32, logits_fp32 = "", [], False, False
    for op, expression in head.postprocess:
        if op == "upcast":
            logits_fp32 = True
        elif op in ("softcap", "softcap_fp32") and not softcap:
            softcap, softcap_fp32 = expression, op == "softcap_fp32"
        elif op in ("scale_div", "scale_mul") and not scale and not softcap:
            scale = ["div" if op == "scale_div" else "mul", expression]
        else:
            refusals.append(
                Finding(
                    "causal_lm", head.cls, head.line, f"logit post-processing the fused loss cannot take: {op}", remedy
                )
            )
            return None
    fitted = {"cls": head.cls, "softcap": softcap, "scale": scale, "head": head.head_attr, "bias": head.lm_head_bias}
    if softcap_fp32:
        fitted["softcap_fp32"] = True
    if logits_fp32 and not softcap_fp32:
        fitted["logits_fp32"] = True
    return fitted


def _experts(structure: ModelStructure, skipped: list[Finding]) -> dict[str, Any] | None:
    moe = structure.moe
    if moe is None:
        return None
    experts = moe.experts
    remedy = "guard the experts call by hand with a kernel for this layout"
    if not moe.experts_call:
        skipped.append(
            Finding(
                "experts", moe.sparse_block, moe.sparse_block_line, moe.reason or "no call self.experts(x, idx, w)"
            )
        )
        return None
    if experts is None:
        skipped.append(Finding("experts", moe.sparse_block, moe.sparse_block_line, "no fused experts class found"))
        return None
    if experts.gated_unit == "clamped_swiglu" and experts.transposed and experts.layout == "interleaved":
        return _clamped_swiglu_experts(structure)
    if experts.gated_unit and experts.layout == "gate_up" and not experts.has_bias:
        return _gate_first_unit_experts(structure)
    if experts.layout == "gate_up_transposed" and experts.transposed and not experts.gated_unit:
        if not experts.has_bias and not experts.custom_activation and experts.activation_expr:
            # Aria's loop, recognised exactly by the reader: x @ W[e], gate-first halves, ACT(gate) * up.
            fitted = {"sparse_block": moe.sparse_block, "activation": experts.activation_expr}
            return {**fitted, "block_attr": moe.block_attr, "layout": "transposed"}
    if experts.layout != "gate_up" or experts.has_bias or experts.custom_activation or not experts.activation_expr:
        why = (
            experts.reason
            or ("biases" if experts.has_bias else "")
            or ("a custom activation" if experts.custom_activation else "")
            or (f"layout {experts.layout}" if experts.layout != "gate_up" else "no activation name reachable")
        )
        skipped.append(
            Finding(
                "experts",
                experts.cls,
                experts.line,
                f"the moe_experts slot takes [E, 2I, H] gate-first: {why}",
                remedy,
            )
        )
        return None
    return {"sparse_block": moe.sparse_block, "activation": experts.activation_expr, "block_attr": moe.block_attr}


#: The reader's router kinds that a router slot recomputes, and the Router part's kind (its slot) for each.
ROUTER_KIND_OF = {
    "sigmoid_group_limited": "group_limited",
    "softmax_topk": "softmax_topk",
    "topk_softmax": "topk_softmax",
}


def _router(structure: ModelStructure) -> dict[str, Any] | None:
    """The router's slot guard, for a router the reader recognised exactly (None: it stays upstream's code).

    Each slot recomputes one body, or one of a few bodies told apart by its options; its attributes are the
    ones the reader's match bound, so the guard hands the slot what upstream reads. A router of a recognised
    kind whose roles were not all bound (a weight narrower than the reshape) has no slot and stays as is.
    Options are recorded only where they differ from the Router defaults, so a router with the default
    body keeps the answers (and the generated code) it had before options existed.
    """
    router = structure.moe.router if structure.moe else None
    kind = ROUTER_KIND_OF.get(router.kind) if router is not None else None
    if router is None or kind is None:
        return None
    defaults = Router()
    options = {
        name: router.options[name]
        for name in ROUTER_OPTIONS[kind]
        if name in router.options and router.options[name] != getattr(defaults, name)
    }
    roles = router_roles(kind, options)
    if any(not router.attributes.get(role) for role in roles):
        return None
    return {"cls": router.cls, "kind": kind, **{role: router.attributes[role] for role in roles}, **options}


def _clamped_swiglu_experts(structure: ModelStructure) -> dict[str, Any]:
    """gpt_oss's experts, which the reader recognised exactly: every layout option of the slot, from upstream.

    The limit and alpha are read from the experts' attributes at run time, so the kernel gets upstream's
    constants. The activation argument is the literal "silu": with ``alpha`` the slot computes gpt_oss's
    own unit and does not use it, and the experts keep no config that could name one.
    """
    moe = structure.moe
    assert moe is not None and moe.experts is not None
    experts = moe.experts
    return {
        "sparse_block": moe.sparse_block,
        "activation": '"silu"',
        "block_attr": moe.block_attr,
        "layout": "transposed",
        "interleaved": True,
        "gate_up_bias": experts.gate_up_bias,
        "down_bias": experts.down_bias,
        "limit": f"self.experts.{experts.limit_attr}",
        "alpha": f"self.experts.{experts.alpha_attr}",
    }


def _gate_first_unit_experts(structure: ModelStructure) -> dict[str, Any]:
    """Gate-first experts whose clamped unit the reader recognised exactly (DeepSeek-V4's, MiniMax-M3-VL's,
    Step-3.7's).

    The slot's default layout is theirs; the limit (and gpt_oss's alpha) are read from the experts'
    attributes at run time, as upstream's unit reads them. With ``alpha`` the slot computes gpt_oss's unit and
    the activation argument is not used; the literal "silu" is passed, as for gpt_oss.
    """
    moe = structure.moe
    assert moe is not None and moe.experts is not None
    experts = moe.experts
    fitted = {
        "sparse_block": moe.sparse_block,
        "activation": '"silu"' if experts.gated_unit == "clamped_swiglu" else experts.activation_expr,
        "block_attr": moe.block_attr,
        "limit": f"self.experts.{experts.limit_attr}",
    }
    if experts.gated_unit == "clamped_swiglu":
        fitted["alpha"] = f"self.experts.{experts.alpha_attr}"
    if experts.gated_unit == "activation_first":
        fitted["activation_first"] = True
    return fitted


def _refused_mixer(
    structure_name: str, info: GatedDeltaNetInfo | ShortConvolutionInfo, refusals: list[Finding]
) -> bool:
    """Refuse a mixer without both convs of the slots' signature, or with a piece the reader could not read: its
    layers would run unguarded."""
    if not (info.reason or not info.conv or not info.conv_update):
        return False
    remedy = "guard its calls by hand (replace_function)"
    refusals.append(Finding(structure_name, info.mixer, info.line, info.reason, remedy))
    return True


def _gated_delta_net(structure: ModelStructure, skipped: list[Finding], refusals: list[Finding]) -> dict[str, str]:
    """The hybrid recipe's mixer guards for a Gated DeltaNet hybrid (``GatedDeltaNet`` part, as plain data).

    The delta rule and both causal convs always go behind their slots (a mixer without a conv of the slots'
    signature is refused: its layers would run unguarded); the gated norm only when the reader matched its
    forward to the formulation rms_norm_gated recomputes, else it stays upstream's and is listed as skipped.
    ``conv`` and ``conv_update`` are the module-level functions that run the convs, wherever the mixer reaches
    them: in transformers 5.25 not from its forward but through ``causal_conv1d_forward`` (the reader's
    ``conv_via``), which reads the cache's conv state and calls both, so guarding ``causal_conv1d_fn`` and
    ``causal_conv1d_update`` still puts every conv the mixer runs behind its slot (``causal_conv1d_forward``
    itself stays upstream's: only ``kernelize`` with a mapping for it, which 5.25 does not ship, replaces it).
    ``packed`` records whether packed documents' boundaries reach the whole-sequence path (the chunked delta
    rule as ``cu_seqlens``, the conv as ``cu_seq_lens_q`` in its ``**kwargs``), so its tests check that the
    chunked_delta kernels keep them apart.
    """
    info = structure.linear_attention
    assert info is not None
    if _refused_mixer("linear_attention", info, refusals):
        return {}
    if info.norm is None:
        reason = "the mixer's gated output norm is not the formulation rms_norm_gated recomputes"
        skipped.append(Finding("linear_attention", info.mixer, info.line, reason, "override its forward by hand"))
    return {
        "mixer": info.mixer,
        "norm": info.norm or "",
        "norm_eps": info.norm_eps_attr or "",
        "norm_activation": info.norm_activation or "",
        "conv": info.conv,
        "conv_update": info.conv_update,
        "chunk": info.chunk,
        "recurrent": info.recurrent,
        "packed": info.packed,
    }


def _short_convolution(structure: ModelStructure, refusals: list[Finding]) -> dict[str, Any]:
    """The short-convolution recipe's conv guards (``ShortConvolution`` part, as plain data), or a refusal where
    the mixer reaches no conv of the slots' signature (its layers would run unguarded). ``packed`` as for a Gated
    DeltaNet: the boundaries reach the whole-sequence conv, so its tests check that the chunked_delta conv keeps
    packed documents apart."""
    info = structure.short_convolution
    assert info is not None
    if _refused_mixer("short_convolution", info, refusals):
        return {}
    return {"mixer": info.mixer, "conv": info.conv, "conv_update": info.conv_update, "packed": info.packed}


#: The slots a Gated DeltaNet mixer's guards take, the gated norm's first (when it is guarded).
GATED_DELTA_NET_SLOTS = (
    "causal_conv1d",
    "causal_conv1d_update",
    "chunk_gated_delta_rule",
    "recurrent_gated_delta_rule",
)


#: The slots a short-convolution mixer's guards take.
SHORT_CONVOLUTION_SLOTS = GATED_DELTA_NET_SLOTS[:2]

#: Slots of the loss heads: the coverage floor counts the others.
LOSS_SLOTS = ("causal_lm_loss", "load_balancing_loss", "sequence_classification_loss")


def guarded_slots(arguments: dict[str, Any]) -> tuple[str, ...]:
    """The slots a config with these recipe arguments guards (what its parity suite checks are consulted)."""
    guarded = []
    if arguments.get("norms"):
        guarded.append("rms_norm")
    mlps = arguments.get("mlps") or []
    kinds = {mlp["kind"] for mlp in mlps if not mlp.get("whole")}
    if kinds & {"gated", "fused_gate_up"}:
        guarded.append("glu_activation")
    if any(mlp.get("whole") for mlp in mlps):
        guarded.append("gated_mlp")
    if "plain" in kinds:
        guarded.append("activation")
    sites = arguments.get("call_sites") or []
    if any(site["layer_norms"] or site.get("chosen_layer_norms") for site in sites):
        guarded.append("layer_norm")
    if any(site["activation"] for site in sites) and "activation" not in guarded:
        guarded.append("activation")
    if arguments.get("rope") or arguments.get("mrope"):
        guarded.append("rope")
    if (arguments.get("vision") or {}).get("rope"):
        guarded.append("rope_vision")
    if arguments.get("experts"):
        guarded.append("moe_experts")
    if arguments.get("router"):
        guarded.append(f"{arguments['router'].get('kind', 'group_limited')}_router")
    if arguments.get("indexer") or (arguments.get("composed") or {}).get("indexer"):
        guarded.append("dsa_indexer")
    mixer = arguments.get("gated_delta_net")
    if mixer:
        guarded += (["rms_norm_gated"] if mixer.get("norm") else []) + list(GATED_DELTA_NET_SLOTS)
    if arguments.get("short_convolution"):
        guarded += list(SHORT_CONVOLUTION_SLOTS)
    # The sub-models another package's generated classes build (glm46v's glm4v towers) consult their own guards.
    guarded += [slot for slot in arguments.get("sub_model_slots") or [] if slot not in guarded]
    if arguments.get("causal_lm"):
        guarded.append("causal_lm_loss")
    if arguments.get("aux_loss"):
        guarded.append("load_balancing_loss")
    if arguments.get("sequence_classification"):
        guarded.append("sequence_classification_loss")
    return tuple(guarded)


def _text_categories() -> tuple[str, ...]:
    """The text categories: what a package with a tower may be answered as when its causal LM builds none."""
    return categories.names(scaffolded=True, towers=())


def _text_category(structure: ModelStructure) -> str:
    """The text recipe's category for the model's decoder: moe where it routes to experts, else dense."""
    return categories.category_for(experts=structure.moe is not None).name


def _text_answer(structure: ModelStructure, root: Path | None) -> tuple[str, str]:
    """The package's causal LM and the text category that scaffolds it alone, where it is public, builds no tower,
    its classes can be told from the towers' (:func:`text_model_classes`) and that fit holds (llama4's
    ``Llama4ForCausalLM``, moe); else empty."""
    if not causal_lm_is_public(structure, root=root) or towers_on_causal_lm_path(structure, root=root):
        return ()
    path = text_model_classes(structure, root=root)
    if path is None:
        return ()
    answer = _text_category(structure)
    return (
        () if _fit_scaffold(text_model_alone(structure, path), answer).refused else (structure.causal_lm.cls, answer)
    )


def _contradiction(structure: ModelStructure, answered: str, towers: tuple[str, ...]) -> Finding:
    """The answered category against the one upstream's structure shows, with what the reader detected."""
    detected = structure.category
    reason = f"answered {answered}, but upstream's structure is {detected}: {structure.category_reason}"
    if towers and answered in _text_categories() and structure.causal_lm is not None:
        reason += f"; its causal LM {structure.causal_lm.cls} builds {', '.join(towers)}"
    moe = structure.moe
    experts = categories.names(experts=True)
    if answered in experts and moe is None:
        reason += "; upstream has no routed experts"
    elif answered not in experts and answered != OUT_OF_CATEGORY and moe is not None:
        reason += f"; upstream routes to experts in {moe.sparse_block} (line {moe.sparse_block_line})"
    return Finding("category answer", structure.model, 0, reason)


def fit_model(
    structure: ModelStructure,
    category: str | None = None,
    *,
    root: Path | None = None,
    models_roots: tuple[Path, ...] = (),
) -> Fit:
    """The scaffold ``structure`` calls for in ``category`` (default: the detected one).

    An answer other than the detected category is refused, with the detected category's own refusals (if
    any) and the patches they leave to write by hand. One exception, which the structure shows too: in a
    package holding a vision or audio tower whose causal LM builds none (gemma3's ``Gemma3ForCausalLM``),
    that causal LM is a text model of its own, and its text category (dense, or moe) is an answer that
    fits. ``root`` is the transformers tree the structure was read from (None: the installed one).
    ``models_roots``: the folders of a training repository's own model packages, where the scaffold is copied;
    a VLM's sub-model types they register count as this project's do.
    """
    answered = category or structure.category
    if answered != structure.category:
        towers: tuple[str, ...] = ()
        if categories.category(structure.category).towers and answered in _text_categories():
            towers = towers_on_causal_lm_path(structure, root=root)
            if not towers and answered == _text_category(structure):
                path = text_model_classes(structure, root=root)
                return _fit_scaffold(structure if path is None else text_model_alone(structure, path), answered)
        detected = fit_model(structure, root=root, models_roots=models_roots)
        refusals = (_contradiction(structure, answered, towers), *detected.refusals)
        return replace(detected, category=answered, arguments={}, guarded=(), skipped=(), refusals=refusals)
    if structure.category == OUT_OF_CATEGORY:
        finding = Finding("category", structure.model, 0, f"out of category: {structure.category_reason}")
        why = "the snippets cover decoder-only text models, and this one is out of category"
        return Fit(structure, answered, refusals=(finding,), no_patches_because=why)
    row = categories.lookup(answered)
    if row is not None and (row.vlm or row.omni):
        # fitted by fit_vlm / fit_omni over the text fit (docs/scaffolding.md, "VLM scaffolds", "Omni scaffolds")
        fit = _fit_vlm(structure, answered, models_roots) if row.vlm else _fit_omni(structure, answered, models_roots)
        return replace(fit, text_answer=_text_answer(structure, root)) if fit.refused else fit
    if row is None or not row.scaffolded:
        scaffolded = categories.names(scaffolded=True)
        finding = Finding("category", structure.model, 0, f"{answered} is not a category ({', '.join(scaffolded)})")
        return Fit(structure, answered, refusals=(finding,), no_patches_because="the category is unknown")
    return _fit_scaffold(structure, answered)


def _fit_vlm(structure: ModelStructure, category: str, models_roots: tuple[Path, ...] = ()) -> Fit:
    """The vlm / vlm_moe recipe's fit: the text decoder's as the dense / MoE fit's, the vision side's read
    from the reader's VLM report (:func:`modelgraft.generator.recipes.fit_vlm.vlm_arguments`), over the VLM's
    own head where the package also defines a text-only causal LM (:meth:`ModelStructure.for_vlm`)."""
    structure = structure.for_vlm()
    text = _fit_scaffold(structure, categories.category(category).text)
    if structure.vlm is not None and structure.vlm.contract == "composed":
        return _fit_composed(structure, category, text, models_roots)
    found: list[VlmFinding] = []
    arguments = {key: value for key, value in text.arguments.items() if key != "sequence_classification"}
    if "gated_delta_net" in arguments:
        found.append(
            VlmFinding(structure.model, 0, "a Gated DeltaNet text decoder: the vlm recipe has no mixer guards")
        )
    if "short_convolution" in arguments:
        found.append(
            VlmFinding(structure.model, 0, "a short-convolution text decoder: the vlm recipe has no mixer guards")
        )
    arguments.update(vlm_arguments(structure, found, models_roots))
    if categories.category(category).experts and not arguments.get("experts"):
        why = "; ".join(f.reason for f in text.skipped if f.structure == "experts") or "no experts class found"
        found.append(
            VlmFinding(structure.model, 0, f"the routed experts cannot go behind the moe_experts slot: {why}")
        )
    processors = vlm_processors(structure.vlm, found) if structure.vlm is not None else {}
    # The coverage floor counts the vision slots too: the text fit's own count is not the scaffold's.
    refusals = [finding for finding in text.refusals if finding.structure != "coverage"]
    refusals += [Finding("vlm", finding.where, finding.line, finding.reason) for finding in found]
    guarded = guarded_slots(arguments)
    if not refusals and len([slot for slot in guarded if slot not in LOSS_SLOTS]) < 2:
        reason = (
            f"the scaffold would guard only {', '.join(guarded) or 'nothing'}: fewer than the loss head and two slots"
        )
        refusals.append(Finding("coverage", structure.model, 0, reason))
    if refusals:
        return Fit(
            structure,
            category,
            arguments,
            guarded,
            text.skipped,
            tuple(refusals),
            hand_written_patches(arguments),
            processors=processors,
        )
    return Fit(structure, category, arguments, guarded, text.skipped, processors=processors)


#: The text fit's arguments a composed VLM keeps: its module's own norms, MLPs and call sites (the projector's,
#: an own tower's) and the loss head. The decoder's RoPE, experts and router are the composed decoder's, guarded
#: by its own package.
COMPOSED_TEXT_ARGUMENTS = ("norms", "mlps", "call_sites", "causal_lm")
#: ... and those it keeps too when the language model is a class of its own module: nothing else guards them.
OWN_TEXT_ARGUMENTS = ("rope", "experts", "router", "aux_loss")


def _fit_composed(structure: ModelStructure, category: str, text: Fit, models_roots: tuple[Path, ...] = ()) -> Fit:
    """The composed_vlm recipe's fit: the module's own pieces as the text fit reads them, the towers built as
    the generated classes of their sub-configs' types (:func:`modelgraft.generator.recipes.fit_composed.composed_arguments`).

    No coverage floor: the towers' guards are their packages', and every type is checked to have one."""
    found: list[VlmFinding] = []
    arguments = {key: value for key, value in text.arguments.items() if key in COMPOSED_TEXT_ARGUMENTS}
    arguments.update(composed_arguments(structure, found, models_roots))
    own = bool(arguments.get("composed", {}).get("own_text"))
    if own:
        arguments.update({key: value for key, value in text.arguments.items() if key in OWN_TEXT_ARGUMENTS})
        if arguments.get("experts"):
            arguments["composed"]["layers"] = text_layers(structure)
        if structure.dsa_indexer:
            arguments["composed"]["indexer"] = structure.dsa_indexer
        if categories.category(category).experts and not arguments.get("experts"):
            # An own MoE text model whose experts no kernel reads would train unguarded where it matters most.
            why = "; ".join(f.reason for f in text.skipped if f.structure == "experts") or "no experts class found"
            found.append(
                VlmFinding(structure.model, 0, f"the routed experts cannot go behind the moe_experts slot: {why}")
            )
    processors = vlm_processors(structure.vlm, found) if structure.vlm is not None else {}
    refusals = [finding for finding in text.refusals if finding.structure in ("causal_lm",)]
    refusals += [Finding("vlm", finding.where, finding.line, finding.reason) for finding in found]
    guarded = guarded_slots(arguments)
    # A composed decoder's RoPE and experts are its own package's; an own text model's are left here if unguarded.
    skipped = tuple(f for f in text.skipped if own or f.structure not in ("rope", "experts"))
    if refusals:
        why = "a composed VLM's config is its recipe call once every difference above is resolved"
        return Fit(
            structure,
            category,
            arguments,
            guarded,
            skipped,
            tuple(refusals),
            no_patches_because=why,
            processors=processors,
        )
    return Fit(structure, category, arguments, guarded, skipped, processors=processors)


def _fit_omni(structure: ModelStructure, category: str, models_roots: tuple[Path, ...] = ()) -> Fit:
    """The omni / omni_moe recipe's fit: the thinker's text decoder as the dense / MoE fit's, less the classes
    only the speech side uses, and the thinker's towers, speech side and top-level class read from upstream's
    class tree (:func:`modelgraft.generator.recipes.fit_omni.omni_arguments`). An Omni model that holds no
    thinker but an audio tower next to its language model gets the composed audio fit (:func:`_fit_audio_lm`)."""
    answered = categories.category(category)
    text = _fit_scaffold(structure, answered.text)
    audio_lm = structure.audio_lm
    if audio_lm is not None and audio_lm.model_class is not None and not answered.experts:
        return _fit_audio_lm(structure, category, text, models_roots)
    found: list[tuple[str, str]] = []
    arguments = omni_arguments(structure, text.arguments, found, moe=answered.experts)
    processors = omni_processors(structure, found) if arguments else {}
    speech = set(arguments.get("speech_classes") or ())
    skipped = tuple(
        finding
        for finding in text.skipped
        if finding.where not in speech
        and not (finding.structure == "rope" and (arguments.get("mrope") or arguments.get("rope")))
    )
    # What sets the model apart from a Qwen-Omni-like one first: it is the reason a copy cannot be made at all.
    refusals = [Finding("omni", where, 0, reason) for where, reason in found]
    refusals += [finding for finding in text.refusals if finding.structure != "coverage"]
    guarded = guarded_slots(arguments) if arguments else ()
    if not refusals and len([slot for slot in guarded if slot not in LOSS_SLOTS]) < 2:
        reason = (
            f"the scaffold would guard only {', '.join(guarded) or 'nothing'}: fewer than the loss head and two slots"
        )
        refusals.append(Finding("coverage", structure.model, 0, reason))
    if refusals:
        patches = hand_written_patches(arguments or text.arguments)
        return Fit(structure, category, arguments, guarded, skipped, tuple(refusals), patches, processors=processors)
    return Fit(structure, category, arguments, guarded, skipped, processors=processors)


#: The text fit's arguments a composed audio language model keeps: its module's own norms, MLPs, call sites and
#: RoPE function (the audio encoder's, the projector's) and the loss head; the language model's are its package's.
AUDIO_LM_TEXT_ARGUMENTS = ("norms", "mlps", "call_sites", "rope", "causal_lm")


def _fit_audio_lm(structure: ModelStructure, category: str, text: Fit, models_roots: tuple[Path, ...] = ()) -> Fit:
    """The composed_audio recipe's fit: the module's own pieces as the text fit reads them, the towers built as
    the generated classes of their sub-configs' types (:func:`modelgraft.generator.recipes.fit_audio_lm.audio_lm_arguments`).

    No coverage floor: the language model's guards are its own package's, and every type is checked to have one.
    What sets the model apart from a Qwen-Omni-like one is named after the composed contract's differences."""
    found: list[tuple[str, str]] = []
    arguments = {key: value for key, value in text.arguments.items() if key in AUDIO_LM_TEXT_ARGUMENTS}
    arguments.update(audio_lm_arguments(structure, found, models_roots))
    processors = audio_lm_processors(structure, found) if "audio_lm" in arguments else {}
    refusals = [Finding("omni", where, 0, reason) for where, reason in found]
    if refusals and structure.omni is not None:
        where = structure.omni.top_level or structure.model
        refusals += [Finding("omni", where, 0, f"not Qwen-Omni-like: {d}") for d in structure.omni.differences]
    refusals += [finding for finding in text.refusals if finding.structure == "causal_lm"]
    guarded = guarded_slots(arguments)
    # No RoPE function in the module is no finding: the language model's RoPE is its package's.
    skipped = tuple(f for f in text.skipped if not (f.structure == "rope" and f.where == "-"))
    if refusals:
        why = "an audio language model's config is its recipe call once every difference above is resolved"
        return Fit(
            structure,
            category,
            arguments,
            guarded,
            skipped,
            tuple(refusals),
            no_patches_because=why,
            processors=processors,
        )
    return Fit(structure, category, arguments, guarded, skipped, processors=processors)


def _fit_scaffold(structure: ModelStructure, category: str) -> Fit:
    """The dense or MoE recipe's fit of ``structure`` (its category already checked)."""
    skipped: list[Finding] = []
    refusals: list[Finding] = []
    arguments: dict[str, Any] = {
        "norms": _norm(structure, skipped),
        "mlps": _mlps(structure, skipped),
        "call_sites": _call_sites(structure),
        "rope": _rope(structure, skipped),
        "causal_lm": _causal_lm(structure, refusals),
    }
    seq = structure.sequence_classification
    if seq is not None and seq.generic:
        arguments["sequence_classification"] = seq.cls
        if structure.base_model and structure.base_model != f"{structure.prefix}Model":
            arguments["base_model"] = structure.base_model
    else:
        arguments["sequence_classification"] = None
        if seq is not None:
            skipped.append(Finding("sequence_classification", seq.cls, seq.line, seq.reason or "its own forward"))
    if categories.category(category).experts:
        arguments["experts"] = _experts(structure, skipped)
        router = _router(structure)
        if router is not None:  # recorded only where there is one: other scaffolds' answers stay as they were
            arguments["router"] = router
        arguments["aux_loss"] = (structure.causal_lm.aux_loss_function if structure.causal_lm else None) or ""
        if structure.dsa_indexer:  # recorded only where there is one: other scaffolds' answers stay as they were
            arguments["indexer"] = structure.dsa_indexer
            arguments["call_sites"] = _without_indexer_sites(arguments["call_sites"], structure, skipped)
    if structure.linear_attention is not None:  # recorded only for a hybrid: other scaffolds' answers stay
        arguments["gated_delta_net"] = _gated_delta_net(structure, skipped, refusals)
    if structure.short_convolution is not None:  # recorded only for a hybrid, as above
        arguments["short_convolution"] = _short_convolution(structure, refusals)

    guarded = list(guarded_slots(arguments))
    slots = len([slot for slot in guarded if slot not in LOSS_SLOTS])
    if not refusals and slots < 2:
        refusals.append(
            Finding(
                "coverage",
                structure.model,
                0,
                f"the scaffold would guard only {', '.join(guarded) or 'nothing'}: fewer than the loss head and "
                "two slots (skipped: " + "; ".join(f.describe() for f in skipped) + ")",
            )
        )
    patches = hand_written_patches(arguments) if refusals else ()
    return Fit(structure, category, arguments, tuple(guarded), tuple(skipped), tuple(refusals), patches)
