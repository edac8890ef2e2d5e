"""The imports an output adds: the config's ``add_import`` calls, those its snippets declare, its version check.

Merged on the specs themselves and rendered once at the end: from-imports of one module become
one statement with sorted names, so ten snippets importing ten slots read as one line, and a name
upstream still imports from the same module (not dropped) is not imported twice.
"""

from __future__ import annotations

from collections.abc import Iterable

from modelgraft.generator.codegen.plan import Plan
from modelgraft.generator.codegen.version_check import version_check_import
from modelgraft.generator.dsl.config import PatchConfig
from modelgraft.generator.dsl.patches import ImportSpec


def requested_specs(config: PatchConfig, plan: Plan) -> list[ImportSpec]:
    """Every import the output asks for, in order: ``add_import`` calls, each body's snippet imports, then the
    version check's (``require_upstream_version``)."""
    specs = list(config.additional_imports)
    for resolved in plan.all_resolved():
        specs.extend(resolved.source.imports if resolved.source else ())
    if config.upstream_version_check is not None:
        specs.append(version_check_import(config.upstream_version_check))
    return specs


def merged_imports(specs: Iterable[ImportSpec], plan: Plan) -> dict[str, tuple[str, ...]]:
    """Import statement -> the names it binds (checked after normalization: each must survive)."""
    from_names: dict[str, list[str]] = {}
    plain: list[ImportSpec] = []
    for spec in specs:
        if not spec.is_from_import:
            if spec not in plain:
                plain.append(spec)
            continue
        names = from_names.setdefault(spec.module, [])
        for name, alias in spec.imported():
            bound = alias or name
            if bound not in plan.dropped_imports and plan.index.imported_from.get(bound) == (spec.module, name):
                continue
            spelled = f"{name} as {alias}" if alias else name
            if spelled not in names:
                names.append(spelled)
    statements = {spec.render(): ((spec.alias or spec.module).split(".")[0],) for spec in plain}
    for module, names in from_names.items():
        if names:
            unique = sorted(set(names))
            statements[f"from {module} import {', '.join(unique)}"] = tuple(n.split(" as ")[-1] for n in unique)
    return statements
