"""The patch DSL: a :class:`PatchConfig` collects patch records for one output file.

Each primitive only records intent.  Nothing here reads upstream source or
imports torch/transformers, so importing a config is cheap; all validation
against upstream happens in generator.checks at generation time.  What can be
wrong without upstream (a malformed target, a missing argument) is a
:class:`~generator.errors.PatchApiError` at the call, naming the config's file
and line (``modelgraft.generator.dsl.call_site``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, TypeVar

from modelgraft.generator.dsl.call_site import call_site
from modelgraft.generator.dsl.patches import Helper, ImportSpec, Patch, SnippetRef
from modelgraft.generator.errors import PatchApiError

F = TypeVar("F", bound=Callable[..., Any])

#: Keywords of a member patch besides its target, body and description (the fields of :class:`Patch`).
PATCH_OPTIONS = frozenset(f.name for f in fields(Patch)) - {"kind", "target", "description", "body"}

#: What a rendered snippet can be applied as (an external class has no body to render).
SNIPPET_KINDS = ("override_method", "replace_function", "replace_class", "modify_init")


class PatchConfig:
    """One config = one generated file: ``source_module`` patched into ``target_file``."""

    def __init__(self, source_module: str, target_file: str, description: str = "") -> None:
        if not source_module or not target_file.endswith(".py"):
            raise _misuse(
                f"PatchConfig needs a source module and a .py target file, got {source_module!r}, {target_file!r}"
            )
        # The module that created this config: how discovery tells a config from one it imported.
        self.defined_in = sys._getframe(1).f_globals.get("__name__", "")
        self.source_module = source_module
        self.target_file = target_file
        self.description = description
        self.patches: list[Patch] = []
        self.additional_imports: list[ImportSpec] = []
        self.dropped_imports: list[str] = []
        self.post_import_blocks: list[str] = []
        self.helpers: list[Helper] = []
        self.exclusions: list[str] = []
        #: Dotted path of the run-time check the output calls after its imports (:meth:`require_upstream_version`).
        self.upstream_version_check: str | None = None

    # -- member patches -------------------------------------------------------------------
    def _register(self, kind: str, target: str, replacement: Any, description: str, **options: Any) -> Any:
        unknown = sorted(set(options) - PATCH_OPTIONS)
        if unknown:
            raise _misuse(
                f"{kind}: unknown option(s) {', '.join(unknown)}; a patch takes {', '.join(sorted(PATCH_OPTIONS))}",
                target=target,
            )

        def record(body: Any) -> Any:
            self.patches.append(Patch(kind=kind, target=target, description=description, body=body, **options))
            return body

        return record if replacement is None else record(replacement)

    def replace_class(self, target: str, *, replacement: type | None = None, description: str = "", **options: Any):
        """Replace the whole upstream class ``target`` (decorator, or ``replacement=``)."""
        return self._register("replace_class", target, replacement, description, **options)

    def replace_function(
        self, target: str, *, replacement: Callable | None = None, description: str = "", **options: Any
    ):
        """Replace the module-level function ``target``."""
        return self._register("replace_function", target, replacement, description, **options)

    def override_method(
        self,
        target: str,
        *,
        replacement: Callable | None = None,
        description: str = "",
        name_map: Mapping[str, str] | None = None,
        add: bool = False,
        **options: Any,
    ):
        """Replace ``Class.method``; ``add=True`` says the method is new (upstream lacks it)."""
        if "." not in target:
            raise _misuse(f"override_method target must be 'Class.method', got {target!r}", target=target)
        return self._register(
            "override_method", target, replacement, description, name_map=dict(name_map or {}), add=add, **options
        )

    def modify_init(self, target: str, *, replacement: Callable | None = None, description: str = "", **options: Any):
        """Run extra wiring at the end of ``target.__init__``; the original body is kept."""
        return self._register("modify_init", target, replacement, description, **options)

    def add_patch(self, patch: Patch) -> Patch:
        """Record a prepared patch, e.g. one from :func:`create_patch_from_external`."""
        self.patches.append(patch)
        return patch

    def apply_snippet(
        self,
        name: str,
        target: str,
        *,
        kind: str | None = None,
        description: str = "",
        add: bool = False,
        keep_decorators: bool | tuple[str, ...] = True,
        check_signature: bool = True,
        **variables: Any,
    ) -> Patch:
        """Render snippet ``name`` with ``variables`` and apply it to ``target``.

        The kind follows from the target unless given: ``Class.method`` is a
        method override, anything else a function replacement; a snippet that
        defines a class is applied with ``kind="replace_class"``.
        ``add``, ``keep_decorators`` and ``check_signature`` mean what they
        mean for hand-written patches; every other keyword is a template variable.
        """
        if kind is not None and kind not in SNIPPET_KINDS:
            raise _misuse(
                f"apply_snippet({name!r}): kind must be one of {', '.join(SNIPPET_KINDS)}, got {kind!r}",
                target=target,
            )
        patch = Patch(
            kind=kind or ("override_method" if "." in target else "replace_function"),
            target=target,
            description=description or f"snippet {name}",
            body=SnippetRef(name=name, variables=dict(variables)),
            add=add,
            keep_decorators=keep_decorators,
            check_signature=check_signature,
        )
        self.patches.append(patch)
        return patch

    # -- module-level edits ----------------------------------------------------------------
    def add_import(
        self,
        module: str,
        names: list[str] | tuple[str, ...] | None = None,
        *,
        alias: str | None = None,
        is_from_import: bool = True,
    ) -> None:
        """Import something the patch bodies use; normalization must keep it."""
        if is_from_import and not names:
            raise _misuse(f"add_import({module!r}) needs names= for a from-import, or is_from_import=False")
        self.additional_imports.append(ImportSpec(module, tuple(names or ()), alias, is_from_import))

    def drop_import_names(self, *names: str) -> None:
        """Remove names from upstream's module-level imports."""
        self.dropped_imports.extend(names)

    def add_post_import_block(self, code: str) -> None:
        """Raw code placed right after the imports (try/except fallbacks, constants)."""
        self.post_import_blocks.append(code)

    def add_helper(self, body: Any = None, *, description: str = ""):
        """Add a helper function/class (or source text) after the imports; usable as a decorator."""
        if body is None:
            return lambda obj: self.add_helper(obj, description=description)
        self.helpers.append(Helper(body=body, description=description))
        return body

    def exclude_from_output(self, *class_names: str) -> None:
        """Drop classes from the output, and every private upstream member only they used.

        Names in upstream's ``__all__`` stay unless excluded themselves: they are public API.
        """
        self.exclusions.extend(class_names)

    def require_upstream_version(self, *, check: str) -> None:
        """Make the output refuse to import under another upstream version than the one it is generated from.

        After the imports, the output imports ``check`` (a dotted ``module.function``) and calls it with the
        upstream distribution, the exact version this run generates against and ``__name__``; the check raises
        where the installed version differs. Asking again for the same check changes nothing (recipes compose).
        """
        if "." not in check or not all(part.isidentifier() for part in check.split(".")):
            raise _misuse(f"require_upstream_version: check must be a dotted 'module.function', got {check!r}")
        if self.upstream_version_check not in (None, check):
            raise _misuse(
                f"require_upstream_version: this config already calls {self.upstream_version_check!r}, "
                f"not {check!r}; an output has one version check"
            )
        self.upstream_version_check = check

    def inherit_from(self, other: PatchConfig, *, patches: bool = True, skip_targets: tuple[str, ...] = ()) -> None:
        """Take a sibling config's imports, blocks, helpers, exclusions, version check and (optionally) patches.

        This is how a backend sibling (npu) reuses the gpu config and then swaps
        only its device kernels; ``skip_targets`` leaves those patches to the caller.
        """
        self.additional_imports.extend(other.additional_imports)
        self.dropped_imports.extend(other.dropped_imports)
        self.post_import_blocks.extend(other.post_import_blocks)
        self.helpers.extend(other.helpers)
        self.exclusions.extend(other.exclusions)
        if other.upstream_version_check is not None:
            self.require_upstream_version(check=other.upstream_version_check)
        unknown = sorted(set(skip_targets) - {p.target for p in other.patches})
        if unknown:
            raise _misuse(f"inherit_from: {other!r} has no patch for skip_targets {unknown}")
        if patches:
            self.patches.extend(p for p in other.patches if p.target not in skip_targets)

    def __repr__(self) -> str:
        return f"PatchConfig({self.source_module!r} -> {self.target_file!r}, {len(self.patches)} patches)"


def create_patch_from_external(target: str, module: str, name: str, *, description: str = "") -> Patch:
    """Point class ``target`` at ``module.name`` instead of copying an implementation."""
    return Patch(
        kind="external_class",
        target=target,
        description=description or f"use {module}.{name}",
        external_module=module,
        external_name=name,
    )


def _misuse(cause: str, *, target: str | None = None) -> PatchApiError:
    """The error for a wrong call of the patch API, located at the config's line that made it."""
    return PatchApiError(cause, target=target, location=call_site())
