"""Check 1: every patch, exclusion and dropped import names something upstream has, exactly once."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from generator.codegen.patch_source import PatchSource, from_text
from generator.codegen.plan import Plan, ResolvedPatch
from generator.codegen.tokens import rename_identifiers
from generator.dsl.config import PatchConfig
from generator.dsl.patches import Patch
from generator.errors import PatchgenError, TargetError
from generator.upstream.index import ModuleIndex, UpstreamSources
from generator.upstream.member import UpstreamMember


def _renamed(source: PatchSource, name_map: dict[str, str]) -> PatchSource:
    if not name_map:
        return source
    text = rename_identifiers(source.text, name_map)
    decorators = tuple(rename_identifiers(d, name_map) for d in source.decorators)
    renamed = from_text(text, origin=source.origin)
    return replace(
        source,
        name=renamed.name,
        text=renamed.text,
        decorators=decorators,
        node=renamed.node,
        docstring_rows=renamed.docstring_rows,
    )


def _expect_kind(patch: Patch, source: PatchSource, config_name: str) -> None:
    want_class = patch.kind == "replace_class"
    if want_class != isinstance(source.node, ast.ClassDef):
        what = "a class" if want_class else "a function"
        raise TargetError(
            f"{patch.kind} needs {what}, but {source.origin} defines {source.name!r}",
            config=config_name,
            target=patch.target,
        )


def build_plan(
    config_name: str,
    config: PatchConfig,
    index: ModuleIndex,
    sources: UpstreamSources,
    resolve_body: Callable[[Any, UpstreamMember | None], PatchSource],
) -> Plan:
    """Resolve every record of ``config`` against ``index`` or raise naming the first bad one."""
    plan = Plan(config_name=config_name, index=index)
    seen: set[str] = set()

    def fail(cause: str, target: str) -> TargetError:
        return TargetError(cause, config=config_name, target=target)

    for patch in config.patches:
        key = f"{patch.kind}:{patch.target}" if patch.kind == "modify_init" else patch.target
        if key in seen:
            raise fail("patched more than once; each target takes exactly one patch", patch.target)
        seen.add(key)
        cls_name, member = patch.class_name, patch.member_name
        node: ast.AST | None = None
        owner: ModuleIndex = index
        inherited = False
        if patch.kind in ("replace_class", "external_class"):
            node = index.members.get(patch.target)
            if not isinstance(node, ast.ClassDef):
                raise fail(f"upstream {index.module} defines no class {patch.target!r}", patch.target)
        elif patch.kind == "replace_function":
            node = index.members.get(patch.target)
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                raise fail(f"upstream {index.module} defines no module-level function {patch.target!r}", patch.target)
        elif patch.kind == "modify_init":
            if not isinstance(index.members.get(patch.target), ast.ClassDef):
                raise fail(f"upstream {index.module} defines no class {patch.target!r}", patch.target)
            node = index.method(patch.target, "__init__")
            if node is None:
                raise fail("modify_init needs an __init__ defined in the class itself", patch.target)
        else:
            if not isinstance(index.members.get(cls_name), ast.ClassDef):
                raise fail(f"upstream {index.module} defines no class {cls_name!r}", patch.target)
            node = index.method(cls_name, member)
            found = None if node is not None else sources.inherited_method(index, cls_name, member)
            if patch.add and (node is not None or found is not None):
                raise fail(
                    "add=True, but upstream already defines this method; drop add=True to override it",
                    patch.target,
                )
            if found is not None:
                owner, node, inherited = found[0], found[1], True
            if node is None and not patch.add:
                raise fail(
                    f"upstream class {cls_name} has no method {member!r} (nor inherits one); "
                    "pass add=True to add a new method",
                    patch.target,
                )
        upstream = (
            UpstreamMember(owner, node, patch.target)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            else None
        )
        try:
            source = (
                None
                if patch.kind == "external_class"
                else _renamed(resolve_body(patch.body, upstream), dict(patch.name_map))
            )
        except PatchgenError as exc:
            raise exc.with_context(config=config_name, target=patch.target) from exc
        if source is not None:
            _expect_kind(patch, source, config_name)
        if patch.kind in ("replace_class", "external_class", "replace_function"):
            plan.replaced[patch.target] = ResolvedPatch(patch, source, node, index)
        elif patch.kind == "modify_init":
            plan.init_extras[patch.target] = ResolvedPatch(patch, source, node, index)
        elif patch.add:
            plan.added_methods.setdefault(cls_name, []).append(ResolvedPatch(patch, source, None))
        else:
            plan.methods.setdefault(cls_name, {})[member] = ResolvedPatch(
                patch, source, node, owner, inherited=inherited
            )

    for name in config.exclusions:
        if name in plan.excluded:
            raise fail("excluded more than once", name)
        if not isinstance(index.members.get(name), ast.ClassDef):
            raise fail(f"cannot exclude: upstream {index.module} defines no class {name!r}", name)
        if name in plan.replaced or name in plan.modified_classes():
            raise fail("both patched and excluded", name)
        plan.excluded.add(name)

    imported = _top_level_import_names(index)
    for name in config.dropped_imports:
        if name in plan.dropped_imports:
            raise fail("dropped more than once", name)
        if name not in imported:
            raise fail(f"cannot drop: upstream {index.module} has no module-level import of {name!r}", name)
        plan.dropped_imports.add(name)

    for helper in config.helpers:
        body = helper.body
        plan.helpers.append((body if isinstance(body, str) else resolve_body(body, None), helper.description))
    return plan


def _top_level_import_names(index: ModuleIndex) -> set[str]:
    names = set()
    for node in index.tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names
