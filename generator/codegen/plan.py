"""What codegen will do to one upstream module: the plan, and planning it from a config.

Planning resolves every record of a config against upstream (which member it replaces, where an
inherited method is defined), reads every body's source (config code or a rendered snippet) and
works out which members an exclusion takes with it. What it cannot plan (a target upstream lacks, a
body of the wrong kind) stops planning and is recorded as the plan's ``refusal``; judging a finished
plan, and reporting a refusal, is ``modelgraft.generator.checks``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, assert_never

from modelgraft.generator import snippets
from modelgraft.generator.codegen.exclusion import exclusion_effects
from modelgraft.generator.codegen.patch_source import PatchSource, from_object, from_text
from modelgraft.generator.codegen.tokens import rename_identifiers
from modelgraft.generator.dsl.config import PatchConfig
from modelgraft.generator.dsl.patches import Patch, PatchKind, SnippetRef
from modelgraft.generator.errors import PatchgenError, PatchSourceError, SnippetError
from modelgraft.generator.syntax import FUNCTION_NODES, DefinitionNode, import_bindings
from modelgraft.generator.upstream.index import ModuleIndex
from modelgraft.generator.upstream.member import UpstreamMember

if TYPE_CHECKING:
    from modelgraft.generator.context import RunContext

_WHOLE_MEMBER = (PatchKind.REPLACE_CLASS, PatchKind.EXTERNAL_CLASS, PatchKind.REPLACE_FUNCTION)


@dataclass(frozen=True)
class Refusal:
    """Why a config could not be planned: the first record naming something upstream lacks or misuses."""

    cause: str
    target: str


class _Refused(Exception):
    def __init__(self, cause: str, target: str) -> None:
        super().__init__(cause)
        self.refusal = Refusal(cause, target)


@dataclass(frozen=True)
class ResolvedPatch:
    """A patch with its body's source and the upstream member it replaces (None when added)."""

    patch: Patch
    source: PatchSource | None
    upstream: DefinitionNode | None
    # The module whose source holds ``upstream`` (a base class may live elsewhere).
    upstream_index: ModuleIndex | None = None
    # The replaced method is defined on a base class (possibly in another module).
    inherited: bool = False


@dataclass
class Plan:
    """Validated, per-member actions for one config."""

    config_name: str
    index: ModuleIndex
    replaced: dict[str, ResolvedPatch] = field(default_factory=dict)
    methods: dict[str, dict[str, ResolvedPatch]] = field(default_factory=dict)
    added_methods: dict[str, list[ResolvedPatch]] = field(default_factory=dict)
    init_extras: dict[str, ResolvedPatch] = field(default_factory=dict)
    excluded: set[str] = field(default_factory=set)
    dropped_imports: set[str] = field(default_factory=set)
    helpers: list[tuple[PatchSource | str, str]] = field(default_factory=list)
    # Members that leave the output with the excluded classes (those classes included).
    dropped: set[str] = field(default_factory=set)
    # (kept member, excluded class it still uses), in the order a check reports them.
    excluded_still_used: list[tuple[str, str]] = field(default_factory=list)
    # Set when planning stopped early; the rest of the plan is then incomplete.
    refusal: Refusal | None = None

    def modified_classes(self) -> set[str]:
        return set(self.methods) | set(self.added_methods) | set(self.init_extras)

    def all_resolved(self) -> list[ResolvedPatch]:
        out = list(self.replaced.values())
        for per_class in self.methods.values():
            out.extend(per_class.values())
        for added in self.added_methods.values():
            out.extend(added)
        out.extend(self.init_extras.values())
        return out


def body_source(body: Any, upstream: UpstreamMember | None, context: RunContext) -> PatchSource:
    """Source of a patch body: a snippet (rendered with ``upstream``, the member it patches), text or an object."""
    if isinstance(body, SnippetRef):
        text, files = snippets.render(body, upstream, context.templates)
        try:
            source = from_text(text, origin=f"snippet {body.name}")
        except PatchSourceError as exc:
            raise SnippetError(f"snippet {body.name!r} rendered to invalid Python: {exc.cause}") from exc
        return replace(source, files=files)
    if isinstance(body, str):
        return from_text(body, origin="inline source")
    return from_object(body, context.config_files)


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


def _expect_kind(patch: Patch, source: PatchSource) -> None:
    want_class = patch.kind is PatchKind.REPLACE_CLASS
    if want_class != isinstance(source.node, ast.ClassDef):
        what = "a class" if want_class else "a function"
        raise _Refused(f"{patch.kind} needs {what}, but {source.origin} defines {source.name!r}", patch.target)


def build_plan(config_name: str, config: PatchConfig, index: ModuleIndex, context: RunContext) -> Plan:
    """Resolve every record of ``config`` against ``index``; the first one that cannot be planned
    stops planning and becomes ``plan.refusal``. A body that cannot be read raises its own error."""
    plan = Plan(config_name=config_name, index=index)
    try:
        _plan_records(plan, config, index, context)
    except _Refused as refused:
        plan.refusal = refused.refusal
    return plan


def _plan_records(plan: Plan, config: PatchConfig, index: ModuleIndex, context: RunContext) -> None:
    config_name = plan.config_name
    seen: set[str] = set()

    for patch in config.patches:
        key = f"{patch.kind}:{patch.target}" if patch.kind is PatchKind.MODIFY_INIT else patch.target
        if key in seen:
            raise _Refused("patched more than once; each target takes exactly one patch", patch.target)
        seen.add(key)
        cls_name, member = patch.class_name, patch.member_name
        node: DefinitionNode | None = None
        owner: ModuleIndex = index
        inherited = False
        match patch.kind:
            case PatchKind.REPLACE_CLASS | PatchKind.EXTERNAL_CLASS:
                node = index.members.get(patch.target)  # type: ignore[assignment]
                if not isinstance(node, ast.ClassDef):
                    raise _Refused(f"upstream {index.module} defines no class {patch.target!r}", patch.target)
            case PatchKind.REPLACE_FUNCTION:
                node = index.members.get(patch.target)  # type: ignore[assignment]
                if not isinstance(node, FUNCTION_NODES):
                    raise _Refused(
                        f"upstream {index.module} defines no module-level function {patch.target!r}", patch.target
                    )
            case PatchKind.MODIFY_INIT:
                if not isinstance(index.members.get(patch.target), ast.ClassDef):
                    raise _Refused(f"upstream {index.module} defines no class {patch.target!r}", patch.target)
                node = index.method(patch.target, "__init__")
                if node is None:
                    raise _Refused("modify_init needs an __init__ defined in the class itself", patch.target)
            case PatchKind.OVERRIDE_METHOD:
                if not isinstance(index.members.get(cls_name), ast.ClassDef):
                    raise _Refused(f"upstream {index.module} defines no class {cls_name!r}", patch.target)
                found = context.sources.find_method(index, cls_name, member)
                if patch.add and found is not None:
                    raise _Refused(
                        "add=True, but upstream already defines this method; drop add=True to override it",
                        patch.target,
                    )
                if found is None and not patch.add:
                    raise _Refused(
                        f"upstream class {cls_name} has no method {member!r} (nor inherits one); "
                        "pass add=True to add a new method",
                        patch.target,
                    )
                if found is not None:
                    owner, node, inherited = found
            case _:
                assert_never(patch.kind)
        upstream = UpstreamMember(owner, node, patch.target) if isinstance(node, FUNCTION_NODES) else None
        try:
            source = (
                None
                if patch.kind is PatchKind.EXTERNAL_CLASS
                else _renamed(body_source(patch.body, upstream, context), dict(patch.name_map))
            )
        except PatchgenError as exc:
            raise exc.with_context(config=config_name, target=patch.target) from exc
        if source is not None:
            _expect_kind(patch, source)
        if patch.kind in _WHOLE_MEMBER:
            plan.replaced[patch.target] = ResolvedPatch(patch, source, node, index)
        elif patch.kind is PatchKind.MODIFY_INIT:
            plan.init_extras[patch.target] = ResolvedPatch(patch, source, node, index)
        elif patch.add:
            plan.added_methods.setdefault(cls_name, []).append(ResolvedPatch(patch, source, None))
        else:
            plan.methods.setdefault(cls_name, {})[member] = ResolvedPatch(
                patch, source, node, owner, inherited=inherited
            )

    for name in config.exclusions:
        if name in plan.excluded:
            raise _Refused("excluded more than once", name)
        if not isinstance(index.members.get(name), ast.ClassDef):
            raise _Refused(f"cannot exclude: upstream {index.module} defines no class {name!r}", name)
        if name in plan.replaced or name in plan.modified_classes():
            raise _Refused("both patched and excluded", name)
        plan.excluded.add(name)

    imported = import_bindings(index.tree.body)
    for name in config.dropped_imports:
        if name in plan.dropped_imports:
            raise _Refused("dropped more than once", name)
        if name not in imported:
            raise _Refused(f"cannot drop: upstream {index.module} has no module-level import of {name!r}", name)
        plan.dropped_imports.add(name)

    for helper in config.helpers:
        body = helper.body
        plan.helpers.append((body if isinstance(body, str) else body_source(body, None, context), helper.description))
    plan.dropped, plan.excluded_still_used = exclusion_effects(index, plan)
