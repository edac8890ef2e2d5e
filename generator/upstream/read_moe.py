"""The routed-experts structure of an MoE model: sparse block, router, fused experts, shared experts, config names.

The MoE scaffold swaps the experts for a fused kernel and the router for one that returns its logits;
both are exact only for the router kinds and expert layouts the reader recognises by shape, so every
other variant is reported with where it is and why it is not one of them.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from modelgraft.generator.upstream.shapes import attr_binding, match_body, strip_docstring
from modelgraft.generator.upstream.source import ModelSource, called_name, calls_in, is_self_attr
from modelgraft.generator.upstream.structure import ExpertsInfo, MoeInfo, RouterInfo, SharedExpertsInfo

#: The softmax-then-top-k router bodies softmax_topk_router_slot recomputes, each with the slot options that
#: make its kernel follow that body op for op (the slot's own defaults are the first body's; the fit writes
#: only the options that differ). A body is bound with its roles only when its weight is as wide as the
#: reshape (:func:`_weight_is_hidden_wide`); any other softmax-top-k body is still "softmax_topk", unguarded.
_ROUTER_SOFTMAX_TOPK: tuple[tuple[str, dict[str, Any]], ...] = (
    # qwen2_moe / qwen3_moe / olmoe: renormalisation behind norm_topk_prob, fp32 via dtype=, cast back.
    (
        """
P_x = P_x.reshape(-1, self.P_hidden)
P_logits = F.linear(P_x, self.P_w)
P_probs = torch.nn.functional.softmax(P_logits, dtype=torch.float, dim=-1)
P_top, P_idx = torch.topk(P_probs, self.P_k, dim=-1)
if self.P_norm:
    P_top /= P_top.sum(dim=-1, keepdim=True)
P_top = P_top.to(P_logits.dtype)
P_scores = P_top
return (P_logits, P_scores, P_idx)
""",
        {"upcast": "dtype_arg", "cast_back": True, "always_renormalize": False},
    ),
    # qwen3_5_moe / qwen3_vl_moe: always renormalised, otherwise qwen's upcast and cast back.
    (
        """
P_x = P_x.reshape(-1, self.P_hidden)
P_logits = F.linear(P_x, self.P_w)
P_probs = torch.nn.functional.softmax(P_logits, dtype=torch.float, dim=-1)
P_top, P_idx = torch.topk(P_probs, self.P_k, dim=-1)
P_top /= P_top.sum(dim=-1, keepdim=True)
P_top = P_top.to(P_logits.dtype)
P_scores = P_top
return (P_logits, P_scores, P_idx)
""",
        {"upcast": "dtype_arg", "cast_back": True, "always_renormalize": True},
    ),
    # mixtral / minimax: always renormalised, fp32 via .float(), the weights left fp32.
    (
        """
P_x = P_x.reshape(-1, self.P_hidden)
P_logits = F.linear(P_x, self.P_w)
P_probs = torch.nn.functional.softmax(P_logits.float(), dim=-1)
P_top, P_idx = torch.topk(P_probs, self.P_k, dim=-1)
P_top /= P_top.sum(dim=-1, keepdim=True)
P_scores = P_top
return (P_logits, P_scores, P_idx)
""",
        {"upcast": "float_call", "cast_back": False, "always_renormalize": True},
    ),
)

_ROUTER_SIGMOID_GROUP = """
P_x = P_x.view(-1, self.P_hidden)
P_logits = F.linear(P_x.type(torch.float32), self.P_w.type(torch.float32))
P_s = P_logits.sigmoid()
P_c = P_s + self.e_score_correction_bias
P_gs = P_c.view(-1, self.P_ng, self.P_ne // self.P_ng).topk(2, dim=-1)[0].sum(dim=-1)
P_gi = torch.topk(P_gs, k=self.P_tg, dim=-1, sorted=False)[1]
P_gm = torch.zeros_like(P_gs)
P_gm.scatter_(1, P_gi, 1)
P_sm = P_gm.unsqueeze(-1).expand(-1, self.P_ng, self.P_ne // self.P_ng).reshape(-1, self.P_ne)
P_c = P_c.masked_fill(~P_sm.bool(), float('-inf'))
P_ti = torch.topk(P_c, k=self.P_k, dim=-1, sorted=False)[1]
P_tw = P_s.gather(1, P_ti)
if self.P_norm:
    P_d = P_tw.sum(dim=-1, keepdim=True) + 1e-20
    P_tw /= P_d
P_tw = P_tw * self.P_scale
return (P_logits, P_tw, P_ti)
"""

#: Slot argument -> the placeholder of _ROUTER_SIGMOID_GROUP that binds the router attribute holding it.
_GROUP_ROUTER_ROLES = {
    "weight": "w",
    "top_k": "k",
    "n_group": "ng",
    "topk_group": "tg",
    "norm_topk_prob": "norm",
    "routed_scaling_factor": "scale",
}

#: Slot argument -> placeholder of the _ROUTER_SOFTMAX_TOPK shapes binding the router attribute holding it
#: ("norm" only in the shape that renormalises behind a flag).
_SOFTMAX_ROUTER_ROLES = {"weight": "w", "top_k": "k", "norm_topk_prob": "norm"}

# gpt_oss: biased logits, their top-k, a softmax over the k values in the logits' own dtype.
_ROUTER_TOPK_SOFTMAX = """
P_logits = F.linear(P_x, self.P_w, self.P_b)
P_top, P_idx = torch.topk(P_logits, self.P_k, dim=-1)
P_scores = torch.nn.functional.softmax(P_top, dim=1, dtype=P_top.dtype)
return (P_logits, P_scores, P_idx)
"""

#: Slot argument -> the placeholder of _ROUTER_TOPK_SOFTMAX binding the router attribute holding it.
_TOPK_SOFTMAX_ROUTER_ROLES = {"weight": "w", "bias": "b", "top_k": "k"}

_EXPERTS_GATE_UP = """
P_out = torch.zeros_like(P_x)
with torch.no_grad():
    P_mask = torch.nn.functional.one_hot(P_idx, num_classes=self.P_ne + 1)
    P_mask = P_mask.permute(2, 1, 0)
    P_hit = torch.greater(P_mask.sum(dim=(-1, -2)), 0).nonzero()
for P_e in P_hit:
    P_e = P_e[0]
    if P_e == self.P_ne:
        continue
    P_pos, P_tok = torch.where(P_mask[P_e])
    P_cur = P_x[P_tok]
    P_g, P_u = nn.functional.linear(P_cur, self.gate_up_proj[P_e]).chunk(2, dim=-1)
    P_h = ACT(P_g) * P_u
    P_h = nn.functional.linear(P_h, self.down_proj[P_e])
    P_h = P_h * P_w[P_tok, P_pos, None]
    P_out.index_add_(0, P_tok, P_h.to(P_out.dtype))
return P_out
"""

# Aria: [E, H, 2I] weights applied as x @ W[e], no bias, gate-first halves, ACT(gate) * up inline; the one-hot
# spelt either way. The moe_experts slot's "transposed" layout.
_EXPERTS_TRANSPOSED_GATE_UP: tuple[str, ...] = tuple(
    """
P_out = torch.zeros_like(P_x)
with torch.no_grad():
    P_mask = ONE_HOT(P_idx, num_classes=self.P_ne + 1)
    P_mask = P_mask.permute(2, 1, 0)
    P_hit = torch.greater(P_mask.sum(dim=(-1, -2)), 0).nonzero()
for P_e in P_hit:
    P_e = P_e[0]
    if P_e == self.P_ne:
        continue
    P_pos, P_tok = torch.where(P_mask[P_e])
    P_cur = P_x[P_tok]
    P_g, P_u = (P_cur @ self.gate_up_proj[P_e]).chunk(2, dim=-1)
    P_h = ACT(P_g) * P_u
    P_h = P_h @ self.down_proj[P_e]
    P_h = P_h * P_w[P_tok, P_pos, None]
    P_out.index_add_(0, P_tok, P_h.to(P_out.dtype))
return P_out
""".replace("ONE_HOT", one_hot)
    for one_hot in ("torch.nn.functional.one_hot", "nn.functional.one_hot", "F.one_hot")
)

# gpt_oss: [E, H, 2I] weights applied as x @ W[e], a bias after each matmul, the gated unit a method.
_EXPERTS_TRANSPOSED_BIAS = """
P_out = torch.zeros_like(P_x, dtype=P_x.dtype, device=P_x.device)
with torch.no_grad():
    P_mask = torch.nn.functional.one_hot(P_idx, num_classes=self.P_ne)
    P_mask = P_mask.permute(2, 1, 0)
    P_hit = torch.greater(P_mask.sum(dim=(-1, -2)), 0).nonzero()
for P_e in P_hit:
    P_e = P_e[0]
    if P_e == self.P_ne:
        continue
    P_pos, P_tok = torch.where(P_mask[P_e])
    P_cur = P_x[P_tok]
    P_gu = P_cur @ self.gate_up_proj[P_e] + self.P_gub[P_e]
    P_act = self.P_unit(P_gu)
    P_down = P_act @ self.down_proj[P_e] + self.P_db[P_e]
    P_weighted = P_down * P_w[P_tok, P_pos, None]
    P_out.index_add_(0, P_tok, P_weighted.to(P_x.dtype))
return P_out
"""

# gpt_oss's gated unit: interleaved gate/up columns, both clamped, (up + 1) * gate * sigmoid(alpha * gate).
_CLAMPED_SWIGLU = """
P_g, P_u = P_gu[..., ::2], P_gu[..., 1::2]
P_g = P_g.clamp(min=None, max=self.P_limit)
P_u = P_u.clamp(min=-self.P_limit, max=self.P_limit)
P_glu = P_g * torch.sigmoid(P_g * self.P_alpha)
P_o = (P_u + 1) * P_glu
return P_o
"""

# DeepSeek-V4 and the VLM + MoE models after it: [E, 2I, H] weights through F.linear, gate-first, the gated
# unit a method of the experts (so upstream's grouped backends apply the same unit on their packed output).
_EXPERTS_GATE_UP_UNIT = """
P_out = torch.zeros_like(P_x)
with torch.no_grad():
    P_mask = F.one_hot(P_idx, num_classes=self.P_ne + 1).permute(2, 1, 0)
    P_hit = torch.greater(P_mask.sum(dim=(-1, -2)), 0).nonzero()
for P_e in P_hit:
    P_e = P_e[0]
    if P_e == self.P_ne:
        continue
    P_pos, P_tok = torch.where(P_mask[P_e])
    P_cur = self.P_unit(F.linear(P_x[P_tok], self.gate_up_proj[P_e]))
    P_cur = F.linear(P_cur, self.down_proj[P_e]) * P_w[P_tok, P_pos, None]
    P_out.index_add_(0, P_tok, P_cur.to(P_out.dtype))
return P_out
"""

#: Gate-first gated units (the method _EXPERTS_GATE_UP_UNIT calls), each with the gated_unit it is: the slot's
#: ``limit`` alone (DeepSeek-V4: ACT of the clamped gate times the clamped up), or ``limit`` and ``alpha``
#: (gpt_oss's unit on halves instead of alternate columns: MiniMax-M3-VL). A clamp of the gate written
#: ``clamp(min=None, max=...)`` is the same clamp; both spellings are listed.
_GATE_FIRST_UNITS: tuple[tuple[str, str], ...] = tuple(
    (body.replace("CLAMP_GATE", clamp), unit)
    for clamp in ("P_g.clamp(max=self.P_limit)", "P_g.clamp(min=None, max=self.P_limit)")
    for body, unit in (
        (
            """
P_g, P_u = P_gu.chunk(2, dim=-1)
P_g = CLAMP_GATE
P_u = P_u.clamp(min=-self.P_limit, max=self.P_limit)
return ACT(P_g) * P_u
""",
            "clamped",
        ),
        (
            """
P_g, P_u = P_gu.chunk(2, dim=-1)
P_g = CLAMP_GATE
P_u = P_u.clamp(min=-self.P_limit, max=self.P_limit)
P_glu = P_g * torch.sigmoid(P_g * self.P_alpha)
return (P_u + 1.0) * P_glu
""",
            "clamped_swiglu",
        ),
    )
)

#: Step-3.7's unit: the activation first, then (where the layer has a limit at all) the clamps, the gate's on its
#: activated value. Upstream tests the limit for None itself, so the attribute may hold any expression.
_ACTIVATION_FIRST_UNIT = """
P_g, P_u = P_gu.chunk(2, dim=-1)
P_g = ACT(P_g)
if self.P_limit is not None:
    P_g = P_g.clamp(max=self.P_limit)
    P_u = P_u.clamp(min=-self.P_limit, max=self.P_limit)
return P_g * P_u
"""

_DENSE_MARKERS = (
    "mlp_only_layers",
    "first_k_dense_replace",
    "decoder_sparse_step",
    "moe_layer_freq",
    "first_dense_layers",
    "num_dense_layers",
    "moe_layer_start_index",
    "moe_layers",
    "sparse_step",
    "layer_types",
    "mlp_layer_types",
)


_FEED_FORWARD_ATTRS = ("mlp", "feed_forward", "block_sparse_moe", "ffn", "moe")


def experts_holders(source: ModelSource) -> list[str]:
    """Classes whose __init__ keeps routed experts in ``self.experts`` (the sparse-block candidates).

    A mixture of attention heads (jetmoe's attention also holds ``self.experts``) is not a sparse MLP block.
    """
    return [c for c in source.classes if "Attention" not in c and _experts_attr(source, c) is not None]


def _experts_attr(source: ModelSource, cls: str) -> str | None:
    """``experts``, or the attribute holding a module class named ``*Experts`` (jetmoe's ``input_linear``)."""
    assigns = source.init_assigns(cls)
    if "experts" in assigns:
        return "experts"
    for attr in assigns:
        if any("Experts" in c and c != cls for c in source.instantiated_classes(cls, attr)):
            return attr
    return None


def read_moe(
    source: ModelSource, decoder_layer: str | None, config_defaults: dict[str, str] | None = None
) -> MoeInfo | None:
    """The MoE structure; ``config_defaults`` (the config class's fields, as source text) give the values of
    settings the experts read from their config (gpt_oss's clamp limit and alpha)."""
    holders = experts_holders(source)
    if not holders:
        return None
    block, attr, dense_layers, dense_mlp = _sparse_block(source, decoder_layer, holders)
    line = source.classes[block].lineno
    experts_attr = _experts_attr(source, block) or "experts"
    experts_cls = _first(source.instantiated_classes(block, experts_attr))
    router_attr, router_cls = _router(source, block)
    experts = _experts(source, block, experts_cls, config_defaults or {}) if experts_cls else None
    router = _router_info(source, block, router_attr, router_cls)
    shared = _shared(source, block)
    settings = [c for c in (router_cls, experts_cls, block) if c]
    reasons = []
    if experts_attr != "experts":
        reasons.append(f"the experts live in self.{experts_attr} ({experts_cls}), not self.experts")
    elif experts_cls is None:
        reasons.append("self.experts is not a module class (a ModuleList of MLPs or an external class)")
    if block == decoder_layer:
        reasons.append(f"the decoder layer {block} holds self.experts itself (no sparse block class)")
    elif attr != "mlp":
        reasons.append(f"the decoder layer holds the sparse block in self.{attr}, not self.mlp")
    return MoeInfo(
        sparse_block=block,
        sparse_block_line=line,
        experts_call=_experts_call(source, block),
        router=router,
        experts=experts,
        shared_experts=shared,
        num_experts_attr=_config_name(source, settings, ("num_experts", "num_local_experts", "n_routed_experts")),
        top_k_attr=_config_name(source, settings, ("top_k", "num_experts_per_tok", "topk")),
        intermediate_attr=_config_name(
            source, [c for c in (experts_cls, block) if c], ("intermediate_dim", "intermediate_size", "ffn_dim")
        ),
        dense_layers=dense_layers,
        dense_mlp=dense_mlp,
        reason="; ".join(reasons),
        block_attr=attr,
    )


def _first(names: list[str]) -> str | None:
    return names[0] if names else None


def _sparse_block(
    source: ModelSource, decoder_layer: str | None, holders: list[str]
) -> tuple[str, str, str | None, str | None]:
    """(block class, decoder attribute holding it, dense-layer config names, dense MLP class)."""
    if decoder_layer in holders:
        return decoder_layer, "", None, None
    if decoder_layer is not None:
        assigns = source.init_assigns(decoder_layer)
        ordered = [a for a in _FEED_FORWARD_ATTRS if a in assigns] + [
            a for a in assigns if a not in _FEED_FORWARD_ATTRS
        ]
        for attr in ordered:
            classes = source.instantiated_classes(decoder_layer, attr)
            sparse = [c for c in classes if c in holders]
            if sparse:
                dense = [c for c in classes if c not in holders]
                return sparse[0], attr, _dense_marker(source, decoder_layer, attr), _first(dense)
    return holders[0], "mlp", None, None


def _dense_marker(source: ModelSource, decoder_layer: str, attr: str) -> str | None:
    """Config names read by the condition that chooses between the sparse block and the dense MLP."""
    found = source.method(decoder_layer, "__init__")
    if found is None:
        return None
    names: list[str] = []
    for node in ast.walk(found[0]):
        if not isinstance(node, (ast.If, ast.IfExp)):
            continue
        assigns = node.body if isinstance(node, ast.If) else [node.body]
        touches = any(
            is_self_attr(t, attr)
            for n in assigns
            for sub in ast.walk(n)
            if isinstance(sub, ast.Assign)
            for t in sub.targets
        ) or (isinstance(node, ast.IfExp))
        if not touches:
            continue
        for sub in ast.walk(node.test):
            if isinstance(sub, ast.Attribute) and sub.attr in _DENSE_MARKERS and sub.attr not in names:
                names.append(sub.attr)
    if not names:
        # An IfExp on the assignment itself: `self.mlp = Sparse(config) if cond else Dense(config)`.
        for value in source.init_assigns(decoder_layer).get(attr, []):
            for sub in ast.walk(value):
                if isinstance(sub, ast.Attribute) and sub.attr in _DENSE_MARKERS and sub.attr not in names:
                    names.append(sub.attr)
    return ", ".join(names) or None


def _router(source: ModelSource, block: str) -> tuple[str | None, str | None]:
    assigns = source.init_assigns(block)
    for attr in ("gate", "router"):
        if attr in assigns:
            return attr, _first(source.instantiated_classes(block, attr))
    for attr in assigns:
        classes = source.instantiated_classes(block, attr)
        if classes and "Router" in classes[0]:
            return attr, classes[0]
    return None, None


def _router_info(source: ModelSource, block: str, attr: str | None, cls: str | None) -> RouterInfo | None:
    if attr is None:
        return None
    if cls is None:
        return RouterInfo(
            f"{block}.{attr}",
            source.classes[block].lineno,
            "unknown",
            reason=f"self.{attr} is a plain layer; routing happens inline in {block}.forward",
        )
    line = source.classes[cls].lineno
    found = source.method(cls, "forward")
    if found is None:
        return RouterInfo(cls, line, "unknown", reason="no forward")
    body = strip_docstring(found[0].body)
    param = found[0].args.args[1].arg if len(found[0].args.args) > 1 else None
    for text, options in _ROUTER_SOFTMAX_TOPK:
        bound = match_body(text, body)
        if bound is not None and bound["x"] == param:
            if not _weight_is_hidden_wide(source, cls, bound):
                return RouterInfo(cls, line, "softmax_topk")
            roles = _roles(bound, _SOFTMAX_ROUTER_ROLES)
            return RouterInfo(cls, line, "softmax_topk", attributes=roles, options=dict(options))
    bound = match_body(_ROUTER_SIGMOID_GROUP, body)
    if bound is not None and bound["x"] == param:
        return RouterInfo(cls, line, "sigmoid_group_limited", attributes=_roles(bound, _GROUP_ROUTER_ROLES))
    bound = match_body(_ROUTER_TOPK_SOFTMAX, body)
    if bound is not None and bound["x"] == param:
        return RouterInfo(cls, line, "topk_softmax", attributes=_roles(bound, _TOPK_SOFTMAX_ROUTER_ROLES))
    return RouterInfo(cls, line, "unknown", reason=f"forward (line {found[0].lineno}): {_router_features(found[0])}")


def _weight_is_hidden_wide(source: ModelSource, cls: str, bound: dict[str, str]) -> bool:
    """``__init__`` makes the weight ``nn.Parameter(...(E, self.<hidden>))``, the width the body reshapes to.

    The slot reshapes the hidden states to the weight's width, upstream to ``self.<hidden>``: the same only
    when the weight is created that wide.
    """
    values = source.init_assigns(cls).get(attr_binding(bound, "w") or "", [])
    shape = _param_shape(values[0]) if len(values) == 1 else None
    hidden = attr_binding(bound, "hidden")
    return bool(shape) and hidden is not None and is_self_attr(shape[-1], hidden)


def _roles(bound: dict[str, str], placeholders: dict[str, str]) -> dict[str, str]:
    """Slot argument -> the router attribute a match bound to its placeholder (the unbound ones left out)."""
    roles = {role: attr_binding(bound, placeholder) for role, placeholder in placeholders.items()}
    return {role: attr for role, attr in roles.items() if attr}


def _router_features(func: ast.FunctionDef) -> str:
    """A short description of a router that matched no template, for the refusal message."""
    order = []
    for call in calls_in(func):
        name = called_name(call)
        if name in ("softmax", "sigmoid", "topk") and name not in order:
            order.append(name)
    text = ast.unparse(func)
    extras = [w for w in ("e_score_correction_bias", "topk_group", "jitter", "expert_bias") if w in text]
    shape = " then ".join(order) if order else "no softmax/sigmoid/topk"
    return "not a known router shape (" + shape + (f"; uses {', '.join(extras)}" if extras else "") + ")"


def _experts(source: ModelSource, block: str, cls: str, config_defaults: dict[str, str]) -> ExpertsInfo:
    line = source.classes[cls].lineno
    assigns = source.init_assigns(cls)
    has_bias = any(a.endswith("_bias") and "proj" in a for a in assigns)
    activation_expr = _experts_activation(source, block, cls)
    if "gate_up_proj" not in assigns or "down_proj" not in assigns:
        return ExpertsInfo(
            cls, line, "unknown", has_bias=has_bias, reason="no fused gate_up_proj / down_proj parameters"
        )
    shape = _param_shape(assigns["gate_up_proj"][0])
    if shape is None or len(shape) != 3:
        return ExpertsInfo(cls, line, "unknown", has_bias=has_bias, reason="gate_up_proj is not a 3-d nn.Parameter")
    doubled = [i for i, dim in enumerate(shape) if _is_doubled(dim)]
    found = source.method(cls, "forward")
    forward = found[0] if found else None
    text = "\n".join(ast.unparse(n) for n in (forward, source.own_method(cls, "_apply_gate")) if n is not None)
    custom = "_apply_gate" in text or "self.act_fn" not in text
    if "::2]" in text and "1::2]" in text:
        recognised = _clamped_swiglu_experts(source, cls, forward, doubled, config_defaults)
        if recognised is not None:
            return ExpertsInfo(cls, line, "interleaved", has_bias=has_bias, custom_activation=True, **recognised)
        return ExpertsInfo(
            cls,
            line,
            "interleaved",
            has_bias=has_bias,
            activation_expr=None if custom else activation_expr,
            custom_activation=custom,
            reason="gate/up columns alternate"
            + ("; gate_up_proj is [E, H, 2I] (transposed)" if doubled == [2] else ""),
        )
    if doubled == [1]:
        bound = match_body(_EXPERTS_GATE_UP, forward.body) if forward is not None else None
        unit = _gate_first_unit(source, cls, forward, config_defaults) if bound is None else None
        if unit is not None:
            return ExpertsInfo(cls, line, "gate_up", has_bias=has_bias, custom_activation=True, **unit)
        if bound is None:
            return ExpertsInfo(
                cls,
                line,
                "unknown",
                has_bias=has_bias,
                activation_expr=activation_expr,
                custom_activation=custom,
                reason=f"[E, 2I, H] parameters but forward (line {forward.lineno if forward else line}) is not the "
                "canonical loop of linear(x, gate_up_proj[e]).chunk(2) -> act(gate) * up",
            )
        return ExpertsInfo(cls, line, "gate_up", has_bias=has_bias, activation_expr=activation_expr)
    if doubled == [2]:
        activation = _transposed_gate_up_activation(forward, activation_expr) if not has_bias else None
        if activation is not None:
            return ExpertsInfo(cls, line, "gate_up_transposed", activation_expr=activation, transposed=True, reason="")
        return ExpertsInfo(
            cls,
            line,
            "gate_up_transposed",
            has_bias=has_bias,
            activation_expr=activation_expr,
            custom_activation=custom,
            reason="" if "chunk(2" in text else "transposed parameters but no chunk(2) in forward",
        )
    return ExpertsInfo(cls, line, "unknown", has_bias=has_bias, reason="no dimension of gate_up_proj is 2 * I")


def _transposed_gate_up_activation(forward: ast.FunctionDef | None, activation_expr: str | None) -> str | None:
    """How the sparse block names the activation of Aria's loop (:data:`_EXPERTS_TRANSPOSED_GATE_UP`), recognised
    exactly; None when the loop has another shape or its activation has no name the block can reach.

    ``ACT`` is either ``self.act_fn`` (named as ``__init__`` assigns it: ``activation_expr``) or a literal
    function such as ``F.silu``.
    """
    if forward is None:
        return None
    for loop in _EXPERTS_TRANSPOSED_GATE_UP:
        bound = match_body(loop, forward.body)
        if bound is None:
            continue
        literal = bound.get("act_fn")
        if literal is not None:
            return _LITERAL_ACTIVATIONS.get(literal)
        return activation_expr if attr_binding(bound, "act") == "act_fn" else None
    return None


def _clamped_swiglu_experts(
    source: ModelSource,
    cls: str,
    forward: ast.FunctionDef | None,
    doubled: list[int],
    config_defaults: dict[str, str],
) -> dict[str, object] | None:
    """gpt_oss's experts, recognised exactly: transposed weights, both biases, the clamped SwiGLU unit.

    Returns the ExpertsInfo fields naming the biases and the clamp limit and alpha (attributes, and what
    ``__init__`` assigns them: a number, or a config field with its default), or None when any piece has
    another shape. The slot reads the attributes at run time, so either source gives upstream's values.
    """
    if forward is None or doubled != [2]:
        return None
    loop = match_body(_EXPERTS_TRANSPOSED_BIAS, forward.body)
    if loop is None:
        return None
    unit = source.own_method(cls, attr_binding(loop, "unit") or "")
    bound = match_body(_CLAMPED_SWIGLU, unit.body) if unit is not None and len(unit.args.args) == 2 else None
    if bound is None or bound["gu"] != unit.args.args[1].arg:
        return None
    assigns = source.init_assigns(cls)
    settings: dict[str, tuple[float | None, str]] = {}
    for role in ("limit", "alpha"):
        values = assigns.get(attr_binding(bound, role) or "", [])
        setting = _numeric_setting(values[0], config_defaults) if len(values) == 1 else None
        if setting is None:
            return None
        settings[role] = setting
    return {
        "transposed": True,
        "gate_up_bias": attr_binding(loop, "gub"),
        "down_bias": attr_binding(loop, "db"),
        "gated_unit": "clamped_swiglu",
        "limit_attr": attr_binding(bound, "limit"),
        "limit": settings["limit"][0],
        "limit_config": settings["limit"][1],
        "alpha_attr": attr_binding(bound, "alpha"),
        "alpha": settings["alpha"][0],
        "alpha_config": settings["alpha"][1],
        "reason": "gate/up columns alternate; gate_up_proj is [E, H, 2I] (transposed); biases; clamped SwiGLU",
    }


def _gate_first_unit(
    source: ModelSource, cls: str, forward: ast.FunctionDef | None, config_defaults: dict[str, str]
) -> dict[str, object] | None:
    """A gate-first loop whose gated unit is a method of the experts, recognised exactly (None otherwise).

    Returns the ExpertsInfo fields: the unit's kind, the attributes holding its clamp limit (and alpha) with
    the values ``__init__`` gives them, and, for an ``ACT(gate) * up`` unit, how the sparse block names the
    activation (``self.experts.<act>`` read as upstream's ACT2FN key, or a literal function such as ``F.silu``).
    """
    loop = match_body(_EXPERTS_GATE_UP_UNIT, forward.body) if forward is not None else None
    unit = source.own_method(cls, attr_binding(loop, "unit") or "") if loop is not None else None
    if unit is None or len(unit.args.args) != 2:
        return None
    bound = match_body(_ACTIVATION_FIRST_UNIT, unit.body)
    if bound is not None and bound["gu"] == unit.args.args[1].arg:
        activation = _unit_activation(source, cls, bound)
        limit = attr_binding(bound, "limit")
        if activation is None or len(source.init_assigns(cls).get(limit or "", [])) != 1:
            return None
        return {"gated_unit": "activation_first", "activation_expr": activation, "limit_attr": limit}
    for template, kind in _GATE_FIRST_UNITS:
        bound = match_body(template, unit.body)
        if bound is None or bound["gu"] != unit.args.args[1].arg:
            continue
        activation = _unit_activation(source, cls, bound) if kind == "clamped" else None
        if kind == "clamped" and activation is None:
            return None
        assigns = source.init_assigns(cls)
        fields: dict[str, object] = {"gated_unit": kind, "activation_expr": activation}
        for role in ("limit", "alpha") if kind == "clamped_swiglu" else ("limit",):
            values = assigns.get(attr_binding(bound, role) or "", [])
            setting = _numeric_setting(values[0], config_defaults) if len(values) == 1 else None
            if setting is None:
                return None
            fields[f"{role}_attr"] = attr_binding(bound, role)
            fields[role], fields[f"{role}_config"] = setting
        return fields
    return None


#: Literal activation functions a gated unit may call, and their ACT2FN names.
_LITERAL_ACTIVATIONS = {"F.silu": '"silu"', "nn.functional.silu": '"silu"', "torch.nn.functional.silu": '"silu"'}


def _unit_activation(source: ModelSource, cls: str, bound: dict[str, str]) -> str | None:
    """How the sparse block names the activation a unit's ``ACT(gate)`` applied (None: no name reachable)."""
    literal = bound.get("act_fn")
    if literal is not None:
        return _LITERAL_ACTIVATIONS.get(literal)
    if attr_binding(bound, "act") != "act_fn":
        return None
    return (
        _experts_activation(source, "", cls) if "use_experts_implementation" in source.decorator_names(cls) else None
    )


def _numeric_setting(value: ast.expr, config_defaults: dict[str, str]) -> tuple[float | None, str] | None:
    """(value, config field) of a setting ``__init__`` assigns: ``1.7`` gives (1.7, ""), ``config.x`` gives
    (x's default when it is a number, else None; "x"); anything else None."""
    if isinstance(value, ast.Constant) and type(value.value) in (int, float):
        return float(value.value), ""
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "config":
        try:
            default = ast.literal_eval(config_defaults.get(value.attr, ""))
        except (ValueError, SyntaxError):
            default = None
        number = float(default) if type(default) in (int, float) else None
        return number, value.attr
    return None


def _param_shape(value: ast.expr) -> list[ast.expr] | None:
    """The dims of ``nn.Parameter(torch.empty(a, b, c))`` (also zeros/randn, or a tuple argument)."""
    if not (isinstance(value, ast.Call) and called_name(value) == "Parameter" and value.args):
        return None
    inner = value.args[0]
    if not (isinstance(inner, ast.Call) and inner.args):
        return None
    if len(inner.args) == 1 and isinstance(inner.args[0], (ast.Tuple, ast.List)):
        return list(inner.args[0].elts)
    return list(inner.args)


def _is_doubled(dim: ast.expr) -> bool:
    return (
        isinstance(dim, ast.BinOp)
        and isinstance(dim.op, ast.Mult)
        and any(isinstance(side, ast.Constant) and side.value == 2 for side in (dim.left, dim.right))
    )


#: ``torch.nn.functional`` activations whose ``ACT2FN`` entry of the same name computes the same function
#: (``ACT2FN["gelu"]`` is the exact, erf GELU, as ``F.gelu`` is by default).
_FUNCTIONAL_ACTIVATIONS = ("silu", "relu", "gelu")

#: How a module spells ``torch.nn.functional``.
_FUNCTIONAL_MODULES = ("F", "nn.functional", "torch.nn.functional")


def _experts_activation(source: ModelSource, block: str, cls: str) -> str | None:
    """How the sparse block's forward can name the experts' activation, when it can."""
    for value in source.init_assigns(cls).get("act_fn", []):
        if (
            isinstance(value, ast.Attribute)
            and value.attr in _FUNCTIONAL_ACTIVATIONS
            and ast.unparse(value.value) in _FUNCTIONAL_MODULES
        ):
            # F.silu: a literal function, the same whatever the config (lfm2_moe's experts).
            return json.dumps(value.attr)
        if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant):
            # ACT2FN["silu"]: a literal name, the same whatever the config (Aria's routed experts).
            if isinstance(value.slice.value, str):
                return json.dumps(value.slice.value)
        if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Attribute):
            attr = value.slice.attr
            if source.stores_config(cls) or "use_experts_implementation" in source.decorator_names(cls):
                return f"self.experts.config.{attr}"
            if source.stores_config(block):
                return f"self.config.{attr}"
    return None


def _experts_call(source: ModelSource, block: str) -> bool:
    found = source.method(block, "forward")
    if found is None:
        return False
    calls = [c for c in calls_in(found[0]) if is_self_attr(c.func, "experts")]
    return len(calls) == 1 and len(calls[0].args) == 3 and not calls[0].keywords


def _shared(source: ModelSource, block: str) -> SharedExpertsInfo | None:
    assigns = source.init_assigns(block)
    for attr in ("shared_expert", "shared_experts", "shared_mlp"):
        if attr in assigns:
            cls = _first(source.instantiated_classes(block, attr))
            return SharedExpertsInfo(
                attr=attr,
                cls=cls,
                gated="shared_expert_gate" in assigns,
                linear_attrs=_linear_attrs(source, cls) if cls in source.classes else (),
            )
    return None


def _linear_attrs(source: ModelSource, cls: str) -> tuple[str, ...]:
    """Attributes that ``cls.__init__`` assigns exactly once, each a call of ``nn.Linear``."""
    return tuple(
        attr
        for attr, values in source.init_assigns(cls).items()
        if len(values) == 1 and isinstance(values[0], ast.Call) and ast.unparse(values[0].func) in _LINEAR_CALLS
    )


_LINEAR_CALLS = ("nn.Linear", "torch.nn.Linear")


def _config_name(source: ModelSource, classes: list[str], attrs: tuple[str, ...]) -> str | None:
    for attr in attrs:
        for cls in classes:
            name = source.config_attr_of(cls, attr)
            if name is not None:
                return name
    return None
