"""Where a model applies rotary position embeddings, and whether it is llama's rotate-half formulation.

A rope slot replaces ``apply_rotary_pos_emb`` only when upstream's body is exactly llama's (full
rotary dim, rotate-half pairing); partial, interleaved and complex variants are reported, not guarded.
"""

from __future__ import annotations

import ast

from generator.upstream.shapes import match_body
from generator.upstream.source import ModelSource
from generator.upstream.structure import RopeInfo

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

_NAME = "apply_rotary_pos_emb"


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
    bound = match_body(_APPLY, func.body)
    if bound is None:
        return RopeInfo(
            **base, reason=f"{func.name} (line {func.lineno}) is not llama's body: {_describe(source, func)}"
        )
    if params[:4] != (bound["q"], bound["k"], bound["cos"], bound["sin"]) or bound["dim"] not in params:
        return RopeInfo(**base, reason=f"{func.name} takes {params}, not (q, k, cos, sin, ..., unsqueeze_dim)")
    rotate = source.functions.get("rotate_half")
    if rotate is None or match_body(_ROTATE_HALF, rotate.body) is None:
        where = f"line {rotate.lineno}" if rotate is not None else "not defined in the module"
        return RopeInfo(**base, reason=f"rotate_half ({where}) is not llama's")
    reason = ""
    variants = sorted(n for n in source.functions if n.startswith("apply_rotary") and n != _NAME)
    if variants:
        reason = f"note: the module also defines {', '.join(variants)}, which a guard leaves as upstream has it"
    return RopeInfo(**base, formulation="rotate_half", reason=reason)


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
