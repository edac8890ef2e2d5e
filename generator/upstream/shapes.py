"""Match a function body against a canonical formulation written as source text.

The reader trusts a formulation only when upstream's code has exactly the shape of one it knows, so a
guard it enables recomputes the same thing. Matching is structural (``ast``), not textual: comments,
docstrings, line breaks and parentheses do not matter, and local names and ``self`` attribute names are
free, bound by placeholders that the caller reads back (which attribute is the weight, which is eps).

Placeholders in a template:

* a name ``P_<role>`` (local variable or parameter) matches any name, the same one at every use;
* an attribute ``<obj>.P_<role>`` matches any attribute name, the same at every use, and two attribute
  roles never bind the same name (``gate`` and ``up`` are different projections);
* a name ``E_<role>`` matches any expression, bound to its source text (a literal eps);
* a call ``ACT(arg)`` matches ``self.<attr>(arg)`` (role ``act``, bound to the attribute) or a function
  ``F.<fn>(arg)`` / ``nn.functional.<fn>(arg)`` / ``torch.<fn>(arg)`` (role ``act_fn``, bound to its text).
"""

from __future__ import annotations

import ast
from functools import lru_cache

_SKIPPED_FIELDS = frozenset({"ctx", "lineno", "col_offset", "end_lineno", "end_col_offset", "type_comment", "kind"})
_FUNCTION_PREFIXES = ("F.", "nn.functional.", "torch.nn.functional.", "torch.")


def strip_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements of a body without its leading docstring (a docstring changes nothing it computes)."""
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            return body[1:]
    return list(body)


# A pure function of its argument (the canonical body texts are constants), so memoising it holds no run state.
@lru_cache(maxsize=None)
def template(source: str) -> tuple[ast.stmt, ...]:
    """Parse a canonical body once (cached: the same templates serve every model of a survey)."""
    return tuple(ast.parse(source).body)


def match_body(source: str, body: list[ast.stmt]) -> dict[str, str] | None:
    """Bindings of the placeholders when ``body`` has the template's exact shape, else None."""
    expected = template(source)
    actual = strip_docstring(body)
    if len(expected) != len(actual):
        return None
    bindings: dict[str, str] = {}
    for want, got in zip(expected, actual):
        if not _match(want, got, bindings):
            return None
    return bindings


def _bind(bindings: dict[str, str], role: str, value: str, *, attribute: bool) -> bool:
    key = ("." if attribute else "") + role
    bound = bindings.get(key)
    if bound is not None:
        return bound == value
    if attribute and any(k.startswith(".") and v == value for k, v in bindings.items()):
        return False
    bindings[key] = value
    return True


def _match(want: object, got: object, bindings: dict[str, str]) -> bool:
    if isinstance(want, list):
        return (
            isinstance(got, list) and len(want) == len(got) and all(_match(w, g, bindings) for w, g in zip(want, got))
        )
    if not isinstance(want, ast.AST):
        return want == got
    if isinstance(want, ast.Name) and want.id.startswith("E_"):
        return isinstance(got, ast.expr) and _bind(bindings, "=" + want.id[2:], ast.unparse(got), attribute=False)
    if isinstance(want, ast.Name) and want.id.startswith("P_"):
        return isinstance(got, ast.Name) and _bind(bindings, want.id[2:], got.id, attribute=False)
    if isinstance(want, ast.arg) and want.arg.startswith("P_"):
        return isinstance(got, ast.arg) and _bind(bindings, want.arg[2:], got.arg, attribute=False)
    if isinstance(want, ast.Call) and isinstance(want.func, ast.Name) and want.func.id == "ACT":
        return _match_activation(want, got, bindings)
    if type(want) is not type(got):
        return False
    if isinstance(want, ast.Attribute) and want.attr.startswith("P_"):
        assert isinstance(got, ast.Attribute)
        return _bind(bindings, want.attr[2:], got.attr, attribute=True) and _match(want.value, got.value, bindings)
    for name, value in ast.iter_fields(want):
        if name in _SKIPPED_FIELDS:
            continue
        if not _match(value, getattr(got, name, None), bindings):
            return False
    return True


def _match_activation(want: ast.Call, got: object, bindings: dict[str, str]) -> bool:
    if not isinstance(got, ast.Call) or len(got.args) != 1 or got.keywords:
        return False
    if not _match(want.args[0], got.args[0], bindings):
        return False
    func = got.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        return _bind(bindings, "act", func.attr, attribute=True)
    text = ast.unparse(func)
    if text.startswith(_FUNCTION_PREFIXES) and "self" not in text:
        return _bind(bindings, "act_fn", text, attribute=False)
    return False


def expr_binding(bindings: dict[str, str], role: str) -> str | None:
    """The source text an ``E_<role>`` placeholder bound."""
    return bindings.get("=" + role)


def attr_binding(bindings: dict[str, str], role: str) -> str | None:
    """The attribute name a ``.P_<role>`` placeholder bound (None when the template has no such role)."""
    return bindings.get("." + role)
