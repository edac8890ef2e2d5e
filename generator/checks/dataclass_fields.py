"""Check 5: a reused patch (``name_map``) must not silently drop output-dataclass fields.

A body written for a dense sibling builds ``<Dense>ModelOutputWithPast(...)``;
after renaming it builds the MoE dataclass, which has extra fields (such as
``router_logits``) the body never fills.  The field sets of the sibling's and
the target's dataclass must be equal, else the body has to be cloned.
"""

from __future__ import annotations

import ast

from modelgraft.generator.codegen.plan import Plan
from modelgraft.generator.errors import DataclassFieldError, UpstreamError
from modelgraft.generator.upstream.index import ModuleIndex, UpstreamSources


def dataclass_fields(sources: UpstreamSources, index: ModuleIndex, name: str) -> set[str] | None:
    """Annotated fields of class ``name`` and its bases, or None if it is not a resolvable class."""
    found = sources.resolve_class(index, name)
    if found is None:
        return None
    owner, node = found
    fields = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    for base in node.bases:
        if isinstance(base, ast.Name):
            inherited = dataclass_fields(sources, owner, base.id)
            fields |= inherited or set()
    return fields


def _constructed_names(fn: ast.AST) -> set[str]:
    return {
        n.func.id
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id[:1].isupper()
    }


def check_dataclass_fields(plan: Plan, sources: UpstreamSources, origin_modules: dict[int, str]) -> None:
    """``origin_modules`` maps id(patch) -> the upstream module the reused body was written for."""
    for resolved in plan.all_resolved():
        patch, source = resolved.patch, resolved.source
        if not patch.name_map or source is None:
            continue
        origin = origin_modules.get(id(patch))
        if origin is None:
            continue
        try:
            origin_index = sources.get(origin)
        except UpstreamError:
            continue
        inverse = {new: old for old, new in patch.name_map.items()}
        for name in sorted(_constructed_names(source.node)):
            original = name
            for new, old in sorted(inverse.items(), key=lambda kv: -len(kv[0])):
                original = original.replace(new, old)
            if original == name:
                continue
            target_fields = dataclass_fields(sources, plan.index, name)
            origin_fields = dataclass_fields(sources, origin_index, original)
            if target_fields is None or origin_fields is None or not (target_fields or origin_fields):
                continue
            if target_fields != origin_fields:
                missing = sorted(target_fields - origin_fields)
                extra = sorted(origin_fields - target_fields)
                detail = "; ".join(
                    part
                    for part in (
                        f"fields the reused body never sets: {', '.join(missing)}" if missing else "",
                        f"fields the target lacks: {', '.join(extra)}" if extra else "",
                    )
                    if part
                )
                raise DataclassFieldError(
                    f"reused body (name_map) constructs {name} (from {original}) but the field sets differ: {detail}; "
                    "clone the body for this model instead of reusing it",
                    config=plan.config_name,
                    target=patch.target,
                )
