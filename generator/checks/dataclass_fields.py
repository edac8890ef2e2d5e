"""Check 5: a reused patch (``name_map``) must not silently drop output-dataclass fields.

A body written for a dense sibling builds the dense model's output dataclass. Two ways that goes wrong for
the MoE sibling it is reused in, both checked:

- the dataclass is the sibling's own (``<Dense>ModelOutputWithPast``): after renaming, the body builds the
  MoE dataclass, which has extra fields (such as ``router_logits``) the body never fills. The field sets of
  the sibling's and the target's dataclass must be equal.
- the dataclass is shared (``BaseModelOutputWithPast``, which the rename leaves alone), while upstream's
  member of the target builds a richer one (``MoeModelOutputWithPast``): the body would return a dataclass
  without the fields upstream's callers read. Every dataclass upstream's member builds and the body does not
  must have no field the body's own dataclasses lack.

Either way the body has to be cloned for the model.
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


def _missing_upstream_fields(
    sources: UpstreamSources, body: set[str], origin: ModuleIndex, upstream: ast.AST, index: ModuleIndex
) -> tuple[str, str, list[str]] | None:
    """(the body's dataclass, upstream's, the fields only upstream's has) where upstream's member builds a
    dataclass with fields that none of the body's dataclasses has; None when there is no such pair. The body's
    names resolve in ``origin``, the module it was written for; upstream's in ``index``."""
    built = {name: dataclass_fields(sources, origin, name) for name in body}
    built = {name: fields for name, fields in built.items() if fields}
    if not built:
        return None
    for theirs in sorted(_constructed_names(upstream) - body):
        their_fields = dataclass_fields(sources, index, theirs)
        if not their_fields:
            continue
        mine, mine_fields = max(built.items(), key=lambda item: len(item[1] & their_fields))
        missing = sorted(their_fields - mine_fields)
        if mine_fields <= their_fields and missing:
            return mine, theirs, missing
    return None


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
        constructed = _constructed_names(source.node)
        if resolved.upstream is not None:
            richer = _missing_upstream_fields(
                sources, constructed, origin_index, resolved.upstream, resolved.upstream_index or plan.index
            )
            if richer is not None:
                mine, theirs, missing = richer
                raise DataclassFieldError(
                    f"reused body (name_map) constructs {mine} where upstream's {patch.target} constructs {theirs}: "
                    f"fields the reused body never sets: {', '.join(missing)}; clone the body for this model instead "
                    "of reusing it",
                    config=plan.config_name,
                    target=patch.target,
                )
        for name in sorted(constructed):
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
