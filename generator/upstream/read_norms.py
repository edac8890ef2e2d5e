"""Norm classes of a modeling module and the formulation each computes (``NORM_KINDS``).

A norm is recognised only by the exact shape of its forward (and ``_norm`` helper), because each kind
maps to one slot call that must recompute it bit for bit; anything else is ``unknown`` with the reason.
"""

from __future__ import annotations

import ast
import re

from modelgraft.generator.upstream.shapes import attr_binding, expr_binding, match_body, strip_docstring
from modelgraft.generator.upstream.source import ModelSource, called_name
from modelgraft.generator.upstream.structure import NormInfo

_NORM_NAME = re.compile(r"(RMSNorm|LayerNorm|Norm)$")

# llama's variance form; ``{tail}`` is the return statement that decides the kind.
_LLAMA_VARIANCE = """
P_dt = P_x.dtype
P_x = P_x.to(torch.float32)
P_var = P_x.pow(2).mean(-1, keepdim=True)
P_x = P_x * torch.rsqrt(P_var + self.P_eps)
{tail}
"""

# Forward bodies whose normalisation is inline: (kind, template).
_INLINE = (
    ("rms_weight", _LLAMA_VARIANCE.format(tail="return self.P_w * P_x.to(P_dt)")),
    ("rms_weight", _LLAMA_VARIANCE.format(tail="return P_x.to(P_dt) * self.P_w")),
    ("rms_weight_cast_last", _LLAMA_VARIANCE.format(tail="return (self.P_w * P_x).to(P_dt)")),
    ("rms_weight_cast_last", _LLAMA_VARIANCE.format(tail="return (P_x * self.P_w).to(P_dt)")),
    # helium: the weight is upcast explicitly; fp32 * weight promotes to fp32 anyway, so the same numbers.
    ("rms_weight_cast_last", _LLAMA_VARIANCE.format(tail="return (self.P_w.to(torch.float32) * P_x).to(P_dt)")),
    ("rms_unweighted", _LLAMA_VARIANCE.format(tail="return P_x.to(P_dt)")),
    ("layer_norm", "return F.layer_norm(P_x, self.normalized_shape, self.P_w, self.P_b, self.P_eps)"),
    ("layer_norm", "return nn.functional.layer_norm(P_x, self.normalized_shape, self.P_w, self.P_b, self.P_eps)"),
)

# The ``_norm`` helper gemma-style norms call on ``x.float()``.
_NORM_HELPER = "return P_y * torch.rsqrt(P_y.pow(2).mean(-1, keepdim=True) + self.P_eps)"

# Forward bodies that call ``self._norm``: (kind, template).
_WITH_HELPER = (
    (
        "rms_one_plus_weight",
        "P_o = self._norm(P_x.float())\nP_o = P_o * (1.0 + self.P_w.float())\nreturn P_o.type_as(P_x)",
    ),
    # moshi: fp32 normed times the upcast weight, then cast: olmo2's numbers.
    ("rms_weight_cast_last", "P_o = self._norm(P_x.float())\nP_o = P_o * self.P_w.float()\nreturn P_o.type_as(P_x)"),
    # llama4 text: normed cast back first, then weight: llama's numbers.
    ("rms_weight", "P_o = self._norm(P_x.float()).type_as(P_x)\nreturn P_o * self.P_w"),
    ("rms_unweighted", "return self._norm(P_x.float()).type_as(P_x)"),
)

# olmo: weightless F.layer_norm computed in fp32 with a literal eps.
_UPCAST_LAYER_NORMS = (
    "P_dt = P_x.dtype\n"
    "return F.layer_norm(P_x.to(dtype=torch.float32), self.normalized_shape, None, None, eps=E_eps).to(P_dt)",
)


def is_norm_class(source: ModelSource, cls: str) -> bool:
    """A class named like a norm (or an nn.LayerNorm subclass) that does not wrap an attention block."""
    bases = source.base_names(cls)
    if not (_NORM_NAME.search(cls) or any(b.endswith("LayerNorm") for b in bases)):
        return False
    # dbrx's NormAttentionNorm is a block around attention, not a norm.
    for values in source.init_assigns(cls).values():
        for value in values:
            if isinstance(value, ast.Call) and "Attention" in (called_name(value) or ""):
                return False
    return True


def read_norms(source: ModelSource) -> tuple[NormInfo, ...]:
    """Every norm class of the module, classified."""
    return tuple(read_norm(source, cls) for cls in source.classes if is_norm_class(source, cls))


def read_norm(source: ModelSource, cls: str) -> NormInfo:
    node = source.classes[cls]
    forward = source.own_method(cls, "forward")
    bases = source.base_names(cls)
    if forward is None:
        if any(b in ("nn.LayerNorm", "torch.nn.LayerNorm", "LayerNorm") for b in bases):
            return NormInfo(
                cls, node.lineno, "layer_norm", param="input", weight_attr="weight", bias_attr="bias", eps_attr="eps"
            )
        return NormInfo(cls, node.lineno, "unknown", reason=f"no forward of its own (bases: {', '.join(bases)})")
    param = forward.args.args[1].arg if len(forward.args.args) > 1 else None
    body = strip_docstring(forward.body)
    for kind, text in _INLINE:
        bound = match_body(text, body)
        if bound is not None and bound.get("x") == param:
            return _info(source, cls, kind, param, bound)
    helper = source.own_method(cls, "_norm")
    if helper is not None:
        helper_bound = match_body(_NORM_HELPER, helper.body)
        for kind, text in _WITH_HELPER:
            bound = match_body(text, body)
            if bound is not None and bound.get("x") == param:
                if helper_bound is None:
                    return NormInfo(
                        cls,
                        node.lineno,
                        "unknown",
                        param=param,
                        reason=f"forward has the {kind} shape but _norm (line {helper.lineno}) is not the canonical "
                        "x * rsqrt(mean(x^2) + eps)",
                    )
                bound = {**bound, ".eps": helper_bound[".eps"]}
                return _info(source, cls, kind, param, bound)
    for text in _UPCAST_LAYER_NORMS:
        bound = match_body(text, body)
        if bound is not None and bound.get("x") == param:
            eps = expr_binding(bound, "eps")
            return NormInfo(cls, node.lineno, "layer_norm", param=param, eps_value=eps, upcast=True)
    return NormInfo(
        cls,
        node.lineno,
        "unknown",
        param=param,
        reason=f"forward (line {forward.lineno}) matches no known norm formulation",
    )


def _info(source: ModelSource, cls: str, kind: str, param: str | None, bound: dict[str, str]) -> NormInfo:
    weight = attr_binding(bound, "w")
    bias = attr_binding(bound, "b")
    eps = attr_binding(bound, "eps")
    line = source.classes[cls].lineno
    assigns = source.init_assigns(cls)
    missing = [a for a in (weight, eps) if a is not None and a not in assigns]
    if missing:
        return NormInfo(
            cls, line, "unknown", param=param, reason=f"forward reads self.{missing[0]}, which __init__ never sets"
        )
    if kind == "rms_unweighted" and "weight" in assigns:
        return NormInfo(cls, line, "unknown", param=param, reason="a weight is defined but forward never applies it")
    return NormInfo(cls, line, kind, param=param, weight_attr=weight, bias_attr=bias, eps_attr=eps)
