"""MLP classes of a modeling module and their formulation (``MLP_KINDS``), with which attribute plays which role.

An MLP slot recomputes ``down(act(gate(x)) * up(x))`` (or its fused / plain variants) from the module's
own projections, so the reader must know exactly which attribute is the gate, the up and the down
projection, and how the activation can be named inside forward.
"""

from __future__ import annotations

import ast
import re

from modelgraft.generator.upstream.shapes import attr_binding, match_body, strip_docstring
from modelgraft.generator.upstream.source import ModelSource, dotted, is_self_attr
from modelgraft.generator.upstream.structure import MlpInfo

_MLP_NAME = re.compile(r"(MLP|Mlp)$")

_GATED = (
    "P_o = self.P_down(ACT(self.P_gate(P_x)) * self.P_up(P_x))\nreturn P_o",
    "return self.P_down(ACT(self.P_gate(P_x)) * self.P_up(P_x))",
    "P_o = ACT(self.P_gate(P_x)) * self.P_up(P_x)\nreturn self.P_down(P_o)",
    "P_g = ACT(self.P_gate(P_x))\nreturn self.P_down(P_g * self.P_up(P_x))",
)

_FUSED = (
    # phi3 / glm: the first half of the fused projection is the gate.
    "P_u = self.P_gate(P_x)\nP_g, P_u = P_u.chunk(2, dim=-1)\nP_u = P_u * ACT(P_g)\nreturn self.P_down(P_u)",
    "P_gu = self.P_gate(P_x)\nP_g, P_u = P_gu.chunk(2, dim=-1)\nreturn self.P_down(ACT(P_g) * P_u)",
    # granitemoeshared: chunk into a tuple, gate first.
    "P_x = self.P_gate(P_x)\nP_c = P_x.chunk(2, dim=-1)\nP_x = ACT(P_c[0]) * P_c[1]\nP_x = self.P_down(P_x)\nreturn P_x",
)

_PLAIN = (
    "return self.P_down(ACT(self.P_up(P_x)))",
    "P_x = self.P_up(P_x)\nP_x = ACT(P_x)\nP_x = self.P_down(P_x)\nreturn P_x",
    "P_h = self.P_up(P_x)\nP_h = ACT(P_h)\nP_o = self.P_down(P_h)\nreturn P_o",
    "P_x = ACT(self.P_up(P_x))\nP_x = self.P_down(P_x)\nreturn P_x",
    "P_o = self.P_down(ACT(self.P_up(P_x)))\nreturn P_o",
)

_FUNCTIONAL_DROPOUT = "P_v = nn.functional.dropout(P_v, p=self.P_p, training=self.training)"
_MODULE_DROPOUT = "P_v = self.P_drop(P_v)"


def is_mlp_class(source: ModelSource, cls: str) -> bool:
    """Named like an MLP and not itself a routed-experts block (gpt_oss's ``GptOssMLP`` is one)."""
    return bool(_MLP_NAME.search(cls)) and "experts" not in source.init_assigns(cls)


def read_mlps(source: ModelSource, extra: tuple[str, ...] = ()) -> tuple[MlpInfo, ...]:
    """Every MLP class of the module (plus ``extra`` classes used as dense or shared-expert MLPs)."""
    names = [c for c in source.classes if is_mlp_class(source, c)]
    names += [c for c in extra if c in source.classes and c not in names and "experts" not in source.init_assigns(c)]
    names.sort(key=lambda c: source.classes[c].lineno)
    return tuple(read_mlp(source, c) for c in names)


def read_mlp(source: ModelSource, cls: str) -> MlpInfo:
    line = source.classes[cls].lineno
    found = source.method(cls, "forward")
    if found is None:
        return MlpInfo(cls, line, "unknown", reason="no forward")
    forward = found[0]
    params = [a.arg for a in forward.args.args[1:]]
    param = params[0] if params else None
    if len(params) != 1 or forward.args.vararg or forward.args.kwonlyargs:
        return MlpInfo(
            cls, line, "unknown", param=param, reason=f"forward (line {forward.lineno}) takes {params}, not one input"
        )
    body, dropout = _split_dropout(strip_docstring(forward.body))
    for kind, templates in (("gated", _GATED), ("fused_gate_up", _FUSED), ("plain", _PLAIN)):
        for text in templates:
            bound = match_body(text, body)
            if bound is not None and bound.get("x") == param:
                return _info(source, cls, kind, param, bound, dropout)
    return MlpInfo(
        cls, line, "unknown", param=param, reason=f"forward (line {forward.lineno}) matches no known MLP formulation"
    )


def _split_dropout(body: list[ast.stmt]) -> tuple[list[ast.stmt], ast.expr | None]:
    """Take a trailing ``v = dropout(v); return v`` off the body (seed_oss, starcoder2, gpt_bigcode)."""
    if len(body) < 3 or not isinstance(body[-1], ast.Return) or not isinstance(body[-2], ast.Assign):
        return body, None
    for text in (_FUNCTIONAL_DROPOUT, _MODULE_DROPOUT):
        bound = match_body(text, [body[-2]])
        if bound is None:
            continue
        returned = body[-1].value
        if not (isinstance(returned, ast.Name) and returned.id == bound["v"]):
            continue
        if text == _MODULE_DROPOUT and "ropout" not in (attr_binding(bound, "drop") or ""):
            continue
        return body[:-2] + [ast.Return(value=ast.Name(id=bound["v"], ctx=ast.Load()))], body[-2].value
    return body, None


def _info(
    source: ModelSource,
    cls: str,
    kind: str,
    param: str | None,
    bound: dict[str, str],
    dropout: ast.expr | None,
) -> MlpInfo:
    line = source.classes[cls].lineno
    assigns = source.init_assigns(cls)
    roles = {r: attr_binding(bound, r) for r in ("gate", "up", "down", "act")}
    missing = [a for a in roles.values() if a is not None and a not in assigns]
    if missing:
        return MlpInfo(
            cls, line, "unknown", param=param, reason=f"forward uses self.{missing[0]}, not set in __init__"
        )
    act_attr = roles["act"]
    config_attr = None
    activation_expr = None
    if act_attr is not None:
        config_attr = _activation_config_attr(assigns.get(act_attr, []))
        if config_attr is not None and source.stores_config(cls):
            activation_expr = f"self.config.{config_attr}"
    elif "act_fn" in bound:
        # A fixed function (lfm2's F.silu): its name is the activation.
        activation_expr = repr(bound["act_fn"].rsplit(".", 1)[-1])
    return MlpInfo(
        cls,
        line,
        kind,
        param=param,
        gate_attr=roles["gate"],
        up_attr=roles["up"],
        down_attr=roles["down"],
        act_attr=act_attr,
        activation_config_attr=config_attr,
        activation_expr=activation_expr,
        residual_dropout=dropout is not None,
        dropout_expr=dotted(dropout) if dropout is not None else None,
    )


def _activation_config_attr(values: list[ast.expr]) -> str | None:
    """``X`` of ``ACT2FN[config.X]`` (also ``ACT2FN[self.config.X]``)."""
    for value in values:
        if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id == "ACT2FN":
            key = value.slice
            if isinstance(key, ast.Attribute) and (
                (isinstance(key.value, ast.Name) and key.value.id == "config") or is_self_attr(key.value, "config")
            ):
                return key.attr
    return None
