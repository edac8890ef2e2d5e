"""Immutable records of what a config asks for; codegen decides how to apply them.

A record holds the *object* that carries the patch body (a function or class
defined in a config module) or a snippet reference; locating and parsing its
source happens at generation time, so loading a config stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

PatchKind = Literal["replace_class", "replace_function", "override_method", "modify_init", "external_class"]


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


@dataclass(frozen=True)
class Helper:
    """Code placed after the imports: a function/class object or raw source text."""

    body: Any
    description: str = ""
