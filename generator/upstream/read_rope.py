"""Where a model applies rotary position embeddings, and whether it is llama's rotate-half formulation.

A rope slot replaces ``apply_rotary_pos_emb`` only when upstream's body is exactly one of the formulations
the slot recomputes (llama's rotate-half; partial rotary with a pass-through slice; interleaved pairs with
repeated cos/sin; upcast or cast-back variants); complex and other bodies are reported, not guarded.
"""

from __future__ import annotations

import ast

from modelgraft.generator.upstream.shapes import match_body
from modelgraft.generator.upstream.source import ModelSource
from modelgraft.generator.upstream.structure import RopeInfo

_APPLY = """
P_cos = P_cos.unsqueeze(P_dim)
P_sin = P_sin.unsqueeze(P_dim)
P_qe = P_q * P_cos + rotate_half(P_q) * P_sin
P_ke = P_k * P_cos + rotate_half(P_k) * P_sin
return (P_qe, P_ke)
"""

_ROTATE_HALF = """
P_x1 = P_x[..., :P_x.shape[-1] // 2]
P_x2 = P_x[..., P_x.shape[-1] // 2:]
return torch.cat((-P_x2, P_x1), dim=-1)
"""

_ROTATE_INTERLEAVED = """
P_x1 = P_x[..., 0::2]
P_x2 = P_x[..., 1::2]
return torch.stack((-P_x2, P_x1), dim=-1).flatten(-2)
"""

_ROTATE_INTERLEAVED_NAMED = """
P_x1 = P_x[..., ::2]
P_x2 = P_x[..., 1::2]
P_r = torch.stack([-P_x2, P_x1], dim=-1).flatten(-2)
return P_r
"""

_PARTIAL_TAIL = """
P_rd = P_cos.shape[-1]
P_qr, P_qp = (P_q[..., :P_rd], P_q[..., P_rd:])
P_kr, P_kp = (P_k[..., :P_rd], P_k[..., P_rd:])
P_qe = P_qr * P_cos + rotate_half(P_qr) * P_sin
P_ke = P_kr * P_cos + rotate_half(P_kr) * P_sin
P_qe = torch.cat([P_qe, P_qp], dim=-1)
P_ke = torch.cat([P_ke, P_kp], dim=-1)
return (P_qe, P_ke)
"""

_UNSQUEEZE = """
P_cos = P_cos.unsqueeze(P_dim)
P_sin = P_sin.unsqueeze(P_dim)
"""

_REPEAT = """
P_cos = P_cos[..., :P_cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
P_sin = P_sin[..., :P_sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
"""

#: Bodies of apply_rotary_pos_emb the rope slot can recompute, by formulation. The rotation they call
#: (rotate_half) must be llama's halves for the "rotate_half*" ones and the interleaved pairs otherwise.
_VARIANTS = {
    "rotate_half": _APPLY,
    "rotate_half_partial": _UNSQUEEZE + _PARTIAL_TAIL,
    "rotate_half_cast_back": """
P_qt, P_kt = (P_q.dtype, P_k.dtype)
"""
    + _UNSQUEEZE
    + """
P_qe = P_q * P_cos + rotate_half(P_q) * P_sin
P_ke = P_k * P_cos + rotate_half(P_k) * P_sin
return (P_qe.to(P_qt), P_ke.to(P_kt))
""",
    "rotate_half_partial_inline": _UNSQUEEZE
    + """
P_rd = P_cos.shape[-1]
P_q, P_qp = (P_q[..., :P_rd], P_q[..., P_rd:])
P_k, P_kp = (P_k[..., :P_rd], P_k[..., P_rd:])
P_qe = P_q * P_cos + rotate_half(P_q) * P_sin
P_ke = P_k * P_cos + rotate_half(P_k) * P_sin
return (torch.cat((P_qe, P_qp), dim=-1), torch.cat((P_ke, P_kp), dim=-1))
""",
    "interleaved": _UNSQUEEZE
    + _REPEAT
    + """
P_qe = P_q * P_cos + rotate_half(P_q) * P_sin
P_ke = P_k * P_cos + rotate_half(P_k) * P_sin
return (P_qe, P_ke)
""",
    "interleaved_partial": _UNSQUEEZE + _REPEAT + _PARTIAL_TAIL,
    "interleaved_upcast": """
P_dt = P_q.dtype
"""
    + _UNSQUEEZE
    + _REPEAT
    + """
P_qe = P_q.float() * P_cos + rotate_half(P_q).float() * P_sin
P_ke = P_k.float() * P_cos + rotate_half(P_k).float() * P_sin
return (P_qe.to(P_dt), P_ke.to(P_dt))
""",
    "interleaved_pairs_upcast": """
P_dt = P_q.dtype
P_q = P_q.float()
P_k = P_k.float()
"""
    + _UNSQUEEZE
    + """
P_qe = P_q * P_cos + rotate_half(P_q) * P_sin
P_ke = P_k * P_cos + rotate_half(P_k) * P_sin
return (P_qe.to(dtype=P_dt), P_ke.to(dtype=P_dt))
""",
}

_NAME = "apply_rotary_pos_emb"
_INTERLEAVED_ROTATIONS = (_ROTATE_INTERLEAVED, _ROTATE_INTERLEAVED_NAMED)


def read_rope(source: ModelSource) -> RopeInfo:
    func = source.functions.get(_NAME)
    if func is not None:
        return _classify(source, "function", func, None)
    for cls, node in source.classes.items():
        method = source.own_method(cls, _NAME)
        if method is not None:
            return _classify(source, "method", method, cls)
    others = sorted(name for name in source.functions if name.startswith("apply_rotary"))
    if others:
        other = source.functions[others[0]]
        return RopeInfo(
            kind="function",
            name=other.name,
            line=other.lineno,
            params=_params(other),
            formulation="unknown",
            reason=f"no {_NAME}; rotary embedding applied by {other.name} (line {other.lineno})",
        )
    rotary_classes = [c for c in source.classes if "Rotary" in c]
    if rotary_classes:
        return RopeInfo(
            kind="none",
            reason=f"no {_NAME} function; rotary embedding lives in {rotary_classes[0]}",
        )
    return RopeInfo(kind="none", reason="no rotary position embedding (learned or relative positions, alibi)")


def _params(func: ast.FunctionDef) -> tuple[str, ...]:
    args = func.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return tuple(n for n in names if n != "self")


def _classify(source: ModelSource, kind: str, func: ast.FunctionDef, owner: str | None) -> RopeInfo:
    params = _params(func)
    base = {"kind": kind, "name": func.name, "owner": owner, "line": func.lineno, "params": params}
    formulation, bound = None, None
    for name, shape in _VARIANTS.items():
        bound = match_body(shape, func.body)
        if bound is not None:
            formulation = name
            break
    if bound is None or formulation is None:
        return RopeInfo(
            **base, reason=f"{func.name} (line {func.lineno}) is not a known body: {_describe(source, func)}"
        )
    if params[:4] != (bound["q"], bound["k"], bound["cos"], bound["sin"]) or bound["dim"] not in params:
        return RopeInfo(**base, reason=f"{func.name} takes {params}, not (q, k, cos, sin, ..., unsqueeze_dim)")
    rotate = source.functions.get("rotate_half")
    rotations = (_ROTATE_HALF,) if formulation.startswith("rotate_half") else _INTERLEAVED_ROTATIONS
    if rotate is None or not any(match_body(shape, rotate.body) is not None for shape in rotations):
        where = f"line {rotate.lineno}" if rotate is not None else "not defined in the module"
        kind = "llama's halves" if formulation.startswith("rotate_half") else "interleaved pairs"
        return RopeInfo(**base, reason=f"rotate_half ({where}) does not rotate {kind} as {func.name} needs")
    reason = ""
    variants = sorted(n for n in source.functions if n.startswith("apply_rotary") and n != _NAME)
    if variants:
        reason = f"note: the module also defines {', '.join(variants)}, which a guard leaves as upstream has it"
    return RopeInfo(**base, formulation=formulation, reason=reason)


def _describe(source: ModelSource, func: ast.FunctionDef) -> str:
    """What sets a non-canonical rope body apart, in a few words, for the refusal message."""
    text = ast.unparse(func)
    rotate = source.functions.get("rotate_half")
    rotate_text = ast.unparse(rotate) if rotate is not None else ""
    found = []
    if "rotary_dim" in text or "rot_dim" in text or "_pass" in text:
        found.append("partial rotary (a pass-through slice)")
    if "0::2" in text or "0::2" in rotate_text or "repeat_interleave" in text:
        found.append("interleaved pairs")
    if "view_as_complex" in text:
        found.append("complex multiplication")
    if ".float()" in text or ".to(" in text.split("unsqueeze", 1)[-1]:
        found.append("dtype casts around the rotation")
    return ", ".join(found) or "a different formulation"
