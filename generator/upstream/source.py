"""One model's parsed modeling module with the queries every part of the reader asks of it.

Kept apart from the readers so each of them (norms, MLPs, heads, MoE...) is a small module with one job
that asks questions (which classes, which ``self.x = ...`` in ``__init__``, which method a class inherits)
instead of walking the tree itself.
"""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass, field
from functools import cached_property

from modelgraft.generator.syntax import DEFINITION_NODES, children, walk
from modelgraft.generator.upstream.index import ModuleIndex, UpstreamSources, statement_start


def dotted(node: ast.AST) -> str:
    """Source text of an expression (``self.config.vocab_size``), for reports and comparisons."""
    return ast.unparse(node)


def called_name(call: ast.Call) -> str | None:
    """The bare name a call invokes (``Foo`` for ``Foo(...)``, ``Linear`` for ``nn.Linear(...)``)."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def constructed_class(call: ast.Call) -> str | None:
    """The class a call builds when it names one: ``Foo`` for ``Foo(...)`` and for ``Foo._from_config(...)``.

    ``_from_config`` is how transformers builds a sub-model from its sub-config (a VLM's vision tower:
    ``self.visual = XVisionModel._from_config(config.vision_config)``), so it counts as building the class.
    """
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and func.attr == "_from_config" and isinstance(func.value, ast.Name):
        return func.value.id
    return None


def is_self_attr(node: ast.AST, attr: str | None = None) -> bool:
    """``self.<attr>`` (any attribute when ``attr`` is None)."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and (attr is None or node.attr == attr)
    )


#: The calls under a node, kept while its tree lives: the readers ask for one forward's calls again and again.
_CALLS: weakref.WeakKeyDictionary[ast.AST, tuple[ast.Call, ...]] = weakref.WeakKeyDictionary()


def calls_in(node: ast.AST) -> list[ast.Call]:
    """Every call inside ``node``, in source order (a walk is breadth-first, so sort)."""
    found = _CALLS.get(node)
    if found is None:
        calls = [n for n in walk(node) if isinstance(n, ast.Call)]
        found = _CALLS[node] = tuple(sorted(calls, key=lambda n: (n.lineno, n.col_offset)))
    return list(found)


def _calls_in_branches(node: ast.AST) -> list[ast.Call]:
    """The calls under ``node`` that sit in a branch: the body or else of an ``if`` or of an ``a if c else b``.

    One walk that carries whether it is inside a branch, so the statements of nested ifs are visited once.
    """
    found: list[ast.Call] = []
    todo: list[tuple[ast.AST, bool]] = [(node, False)]
    while todo:
        current, in_branch = todo.pop()
        if in_branch and isinstance(current, ast.Call):
            found.append(current)
        if isinstance(current, ast.IfExp):
            todo += [(current.test, in_branch), (current.body, True), (current.orelse, True)]
        elif isinstance(current, ast.If):
            todo += [(current.test, in_branch), *((statement, True) for statement in [*current.body, *current.orelse])]
        else:
            todo += [(child, in_branch) for child in children(current)]
    return found


def _parts_holding(owner: ast.AST, calls: list[ast.Call]) -> list[ast.AST]:
    """The children of a definition that hold any of ``calls``: every child but a body statement that holds none.

    A definition is no branch, so a call is in a branch of ``owner`` exactly when it is in a branch of the child
    holding it; the body statements without one of ``calls`` (most methods of a class) need no walk. A body
    statement holds a call when the call starts within the statement's lines, its decorators included.
    """
    body = getattr(owner, "body", [])
    starts = [(call.lineno, call.col_offset) for call in calls]
    in_body = {id(statement) for statement in body}
    parts: list[ast.AST] = [child for child in children(owner) if id(child) not in in_body]
    for statement in body:
        first = (statement_start(statement), 0)
        last = (statement.end_lineno or statement.lineno, statement.end_col_offset or 0)
        if any(first <= start <= last for start in starts):
            parts.append(statement)
    return parts


@dataclass
class ModelSource:
    """The modeling module of one model plus the batch's parsed-module cache for inherited methods."""

    model: str
    index: ModuleIndex
    sources: UpstreamSources
    _assigns: dict[str, dict[str, list[ast.expr]]] = field(default_factory=dict)

    @cached_property
    def classes(self) -> dict[str, ast.ClassDef]:
        """Classes defined at the top level of the module, in source order."""
        return {n.name: n for n in self.index.tree.body if isinstance(n, ast.ClassDef)}

    @cached_property
    def functions(self) -> dict[str, ast.FunctionDef]:
        return {n.name: n for n in self.index.tree.body if isinstance(n, ast.FunctionDef)}

    @cached_property
    def instantiated(self) -> tuple[str, ...]:
        """Classes of this module built from another class or function of the module (:func:`constructed_class`)."""
        found: set[str] = set()
        for owner in self.index.tree.body:
            if not isinstance(owner, DEFINITION_NODES):
                continue
            for node in calls_in(owner):
                name = constructed_class(node)
                if name in self.classes and name != getattr(owner, "name", None):
                    found.add(name)
        return tuple(sorted(found))

    @cached_property
    def conditionally_instantiated(self) -> tuple[str, ...]:
        """Classes every instantiation of which sits in a branch (``a if cond else b``, or under ``if``)."""
        everywhere: dict[str, list[bool]] = {}
        for owner in self.index.tree.body:
            if not isinstance(owner, DEFINITION_NODES):
                continue
            made = {
                node: name
                for node in calls_in(owner)
                if (name := constructed_class(node)) in self.classes and name != getattr(owner, "name", None)
            }
            if not made:
                continue
            branched = {id(call) for part in _parts_holding(owner, list(made)) for call in _calls_in_branches(part)}
            for node, name in made.items():
                everywhere.setdefault(name, []).append(id(node) in branched)
        return tuple(sorted(name for name, flags in everywhere.items() if all(flags)))

    def base_names(self, cls: str) -> list[str]:
        node = self.classes.get(cls)
        if node is None:
            return []
        return [dotted(b) for b in node.bases]

    def own_method(self, cls: str, name: str) -> ast.FunctionDef | None:
        node = self.index.method(cls, name)
        return node if isinstance(node, ast.FunctionDef) else None

    def method(self, cls: str, name: str) -> tuple[ast.FunctionDef, str | None] | None:
        """``cls.name`` as defined on the class, or inherited: (function, owner class or None when own)."""
        found = self.sources.find_method(self.index, cls, name)
        if found is None or not isinstance(found[1], ast.FunctionDef):
            return None
        owner_index, func, inherited = found
        return func, (_owner_of(owner_index, func) if inherited else None)

    def local_method(self, cls: str, name: str) -> ast.FunctionDef | None:
        """``cls.name`` own or inherited from a class of this module only.

        Attribute questions (what ``__init__`` sets) stop at the module's edge: the bases beyond it
        (``PreTrainedModel``, ``nn.Module``) set nothing a reader asks about, and parsing
        ``modeling_utils`` for them would cost more than the whole model.
        """
        todo = [cls]
        seen: set[str] = set()
        while todo:
            current = todo.pop(0)
            if current in seen or current not in self.classes:
                continue
            seen.add(current)
            own = self.own_method(current, name)
            if own is not None:
                return own
            todo.extend(self.base_names(current))
        return None

    def init_assigns(self, cls: str) -> dict[str, list[ast.expr]]:
        """``self.<attr> = <value>`` anywhere in ``cls.__init__`` (own or inherited): attr -> values in order."""
        if cls not in self._assigns:
            found: dict[str, list[ast.expr]] = {}
            init = self.local_method(cls, "__init__")
            if init is not None:
                for node in walk(init):
                    if isinstance(node, ast.Assign):
                        for target in node.targets:
                            if is_self_attr(target):
                                found.setdefault(target.attr, []).append(node.value)
                    elif isinstance(node, ast.AnnAssign) and node.value is not None and is_self_attr(node.target):
                        found.setdefault(node.target.attr, []).append(node.value)
            for values in found.values():
                values.sort(key=lambda v: (v.lineno, v.col_offset))
            self._assigns[cls] = found
        return self._assigns[cls]

    def instantiated_classes(self, cls: str, attr: str) -> list[str]:
        """Module classes constructed into ``self.<attr>`` in ``cls.__init__`` (both branches of an if)."""
        names: list[str] = []
        for value in self.init_assigns(cls).get(attr, []):
            for call in calls_in(value):
                name = called_name(call)
                if name in self.classes and name not in names:
                    names.append(name)
        return names

    def config_attr_of(self, cls: str, attr: str) -> str | None:
        """``X`` when ``cls.__init__`` does ``self.<attr> = config.X`` (the config name of a setting)."""
        for value in self.init_assigns(cls).get(attr, []):
            # Also `config.X if isinstance(config.X, int) else config.X[layer_idx]` (hunyuan's moe_topk).
            for node in walk(value):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "config":
                    return node.attr
        return None

    def stores_config(self, cls: str) -> bool:
        """``cls.__init__`` keeps ``self.config = config`` (so forward can name config attributes)."""
        return any(isinstance(v, ast.Name) and v.id == "config" for v in self.init_assigns(cls).get("config", []))

    def decorator_names(self, cls: str) -> list[str]:
        node = self.classes.get(cls)
        if node is None:
            return []
        names = []
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            names.append(dotted(target))
        return names


def _owner_of(index: ModuleIndex, func: ast.FunctionDef) -> str | None:
    for node in index.tree.body:
        if isinstance(node, ast.ClassDef) and any(member is func for member in node.body):
            return node.name
    return None
