"""What codegen will do to one upstream module, after every target was validated."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from generator.codegen.patch_source import PatchSource
from generator.dsl.patches import Patch
from generator.upstream.index import ModuleIndex


@dataclass(frozen=True)
class ResolvedPatch:
    """A patch with its body's source and the upstream member it replaces (None when added)."""

    patch: Patch
    source: PatchSource | None
    upstream: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None
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
