"""Immutable records of what a config asks for; codegen decides how to apply them.

A record holds the *object* that carries the patch body (a function or class
defined in a config module) or a snippet reference; locating and parsing its
source happens at generation time, so loading a config stays cheap.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from modelgraft.generator.dsl.call_site import call_site
from modelgraft.generator.errors import PatchApiError


class PatchKind(StrEnum):
    """What a patch does to its target; a string enum, so it prints and compares as the DSL spells it."""

    REPLACE_CLASS = "replace_class"
    REPLACE_FUNCTION = "replace_function"
    OVERRIDE_METHOD = "override_method"
    MODIFY_INIT = "modify_init"
    EXTERNAL_CLASS = "external_class"


# "name" or "name as alias" in an ImportSpec's names.
_AS = re.compile(r"\s+as\s+")


@dataclass(frozen=True)
class SnippetRef:
    """A Jinja snippet under generator/snippets/ and the variables to render it with."""

    name: str
    variables: Mapping[str, Any]


@dataclass(frozen=True)
class Patch:
    """One change to one upstream member.

    ``body`` is the Python object (function or class) whose source becomes the
    new member, or a :class:`SnippetRef` rendered at generation time, or None
    for ``external_class``.
    """

    kind: PatchKind
    target: str
    description: str
    body: Any = None
    name_map: Mapping[str, str] = field(default_factory=dict)
    # override_method only: the method is new on the class (upstream lacks it).
    add: bool = False
    # Upstream decorators: True keeps all, False drops all, a tuple drops those named.
    keep_decorators: bool | tuple[str, ...] = True
    check_signature: bool = True
    # external_class only.
    external_module: str | None = None
    external_name: str | None = None

    def __post_init__(self) -> None:
        # A misspelt kind must fail where the config wrote it, not reach codegen as some other kind.
        try:
            kind = PatchKind(self.kind)
        except ValueError:
            raise PatchApiError(
                f"unknown patch kind {self.kind!r}; a patch is one of {', '.join(k.value for k in PatchKind)}",
                target=self.target,
                location=call_site(),
            ) from None
        object.__setattr__(self, "kind", kind)

    @property
    def class_name(self) -> str:
        return self.target.split(".", 1)[0]

    @property
    def member_name(self) -> str | None:
        return self.target.split(".", 1)[1] if "." in self.target else None


@dataclass(frozen=True)
class ImportSpec:
    """An import the output needs: ``from module import names`` or ``import module [as alias]``."""

    module: str
    names: tuple[str, ...] = ()
    alias: str | None = None
    is_from_import: bool = True

    def render(self) -> str:
        if self.is_from_import:
            return f"from {self.module} import {', '.join(self.names)}"
        return f"import {self.module}" + (f" as {self.alias}" if self.alias else "")

    def imported(self) -> tuple[tuple[str, str | None], ...]:
        """A from-import's (name, alias or None) pairs; names are written ``"x"`` or ``"x as y"``."""
        pairs = []
        for spelled in self.names:
            parts = _AS.split(spelled.strip(), maxsplit=1)
            pairs.append((parts[0], parts[1] if len(parts) > 1 else None))
        return tuple(pairs)

    @classmethod
    def from_statement(cls, node: ast.Import | ast.ImportFrom) -> tuple[ImportSpec, ...]:
        """The specs of one import statement (``import a, b`` is two specs: one module each)."""
        if isinstance(node, ast.ImportFrom):
            spelled = tuple(f"{a.name} as {a.asname}" if a.asname else a.name for a in node.names)
            return (cls("." * node.level + (node.module or ""), spelled),)
        return tuple(cls(a.name, alias=a.asname, is_from_import=False) for a in node.names)


@dataclass(frozen=True)
class Helper:
    """Code placed after the imports: a function/class object or raw source text."""

    body: Any
    description: str = ""
