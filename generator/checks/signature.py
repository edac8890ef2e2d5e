"""Check 2: an override still matches the upstream signature it replaces.

Upstream's parameters must all be present in the override with the same order,
kind and default; the override may add parameters only where callers written
against upstream cannot notice (with a default, or ``*args``/``**kwargs``).
That is the pin-bump hazard: a patch that keeps applying to a changed contract.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from modelgraft.generator.codegen.plan import Plan, ResolvedPatch
from modelgraft.generator.dsl.patches import PatchKind
from modelgraft.generator.errors import PatchgenError, SignatureMismatchError, collected
from modelgraft.generator.syntax import FUNCTION_NODES, FunctionNode


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    default: str | None

    def describe(self) -> str:
        default = f"={self.default}" if self.default is not None else ""
        return f"{self.name} ({self.kind}{default})"


def parameters(fn: FunctionNode) -> list[Param]:
    """The parameters of ``fn`` with kinds and source-normalized defaults."""
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [
        Param(
            a.arg,
            "positional-only" if i < len(args.posonlyargs) else "positional-or-keyword",
            ast.unparse(d) if d else None,
        )
        for i, (a, d) in enumerate(zip(positional, defaults))
    ]
    if args.vararg:
        out.append(Param(args.vararg.arg, "var-positional", None))
    out += [
        Param(a.arg, "keyword-only", ast.unparse(d) if d else None) for a, d in zip(args.kwonlyargs, args.kw_defaults)
    ]
    if args.kwarg:
        out.append(Param(args.kwarg.arg, "var-keyword", None))
    return out


def signature_problems(upstream: FunctionNode, override: FunctionNode) -> list[str]:
    """Human-readable differences; empty when the override honours upstream's contract."""
    want = parameters(upstream)
    have = parameters(override)
    have_by_name = {p.name: p for p in have}
    problems = []
    for p in want:
        got = have_by_name.get(p.name)
        if got is None:
            problems.append(f"missing upstream parameter {p.describe()}")
        elif got != p:
            problems.append(f"parameter {p.name}: upstream {p.describe()}, override {got.describe()}")
    shared = [p.name for p in have if p.name in {w.name for w in want}]
    if not problems and shared != [p.name for p in want]:
        problems.append(f"parameter order differs: upstream {[p.name for p in want]}, override {shared}")
    want_names = {p.name for p in want}
    for i, p in enumerate(have):
        if p.name in want_names:
            continue
        if p.kind not in ("var-positional", "var-keyword") and p.default is None:
            problems.append(f"new parameter {p.name} has no default, so upstream callers would break")
        if p.kind.startswith("positional"):
            shifted = [q.name for q in have[i + 1 :] if q.name in want_names and q.kind.startswith("positional")]
            if shifted:
                problems.append(f"new parameter {p.name} shifts upstream positional parameter {shifted[0]}")
    return problems


def _pairs(resolved: ResolvedPatch) -> list[tuple[str, FunctionNode, FunctionNode]]:
    patch, source, upstream = resolved.patch, resolved.source, resolved.upstream
    if source is None or upstream is None or not patch.check_signature:
        return []
    if isinstance(upstream, ast.ClassDef) and isinstance(source.node, ast.ClassDef):
        pairs = []
        for name in ("__init__", "forward"):
            up = next(
                (n for n in upstream.body if isinstance(n, FUNCTION_NODES) and n.name == name),
                None,
            )
            new = next(
                (n for n in source.node.body if isinstance(n, FUNCTION_NODES) and n.name == name),
                None,
            )
            if up is not None and new is not None:
                pairs.append((f"{patch.target}.{name}", up, new))
        return pairs
    if isinstance(upstream, FUNCTION_NODES) and isinstance(source.node, FUNCTION_NODES):
        target = f"{patch.target}.__init__" if patch.kind is PatchKind.MODIFY_INIT else patch.target
        return [(target, upstream, source.node)]
    return []


#: What to do about a mismatch: follow upstream. Opting out would keep running against the old contract.
ADVICE = "update the override to upstream's parameters; check_signature=False would keep the old contract"


def check_signatures(plan: Plan) -> None:
    """Raise for every override whose signature drifted from upstream (all of them, as after a pin bump)."""
    errors: list[PatchgenError] = []
    for resolved in plan.all_resolved():
        for target, upstream, override in _pairs(resolved):
            problems = signature_problems(upstream, override)
            if problems:
                errors.append(
                    SignatureMismatchError(
                        "signature does not match upstream: " + "; ".join(problems) + f" ({ADVICE})",
                        config=plan.config_name,
                        target=target,
                    )
                )
    if errors:
        raise collected(errors)
