"""Which upstream members disappear with an excluded class: those only it used.

References are read from the code that will be emitted: a patched member
contributes its patch body's names, not upstream's, so a patch that stops
using a helper lets an exclusion take that helper too.  Planning records the
effects; whether a kept member still uses an excluded class is a check's call
(``modelgraft.generator.checks.exclusions``).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from modelgraft.generator.syntax import FUNCTION_NODES, IMPORT_NODES, nested_statements, walk
from modelgraft.generator.upstream.index import ModuleIndex, defined_names

if TYPE_CHECKING:
    from modelgraft.generator.codegen.plan import Plan

ROOTS = "<module statements>"

#: Class attributes that list module classes by name for transformers' device-map and FSDP wrapping
#: (``_no_split_modules``): a name there does not keep its class alive. Like ``__all__``, such a list loses the
#: names of dropped classes in the output (``modelgraft.generator.codegen.assemble``), so a base class that
#: lists the talker's layers does not hold the talker in the module.
NAME_LISTS = ("_no_split_modules",)


def name_lists(node: ast.AST) -> list[ast.List | ast.Tuple]:
    """The literal list or tuple values of every ``NAME_LISTS`` assignment inside ``node``.

    Assignments are statements, so only ``node`` and the statements below it are looked at, never the
    expressions that make up most of a tree.
    """
    found = []
    for sub in (node, *nested_statements(node)):
        if isinstance(sub, ast.Assign):
            targets, value = sub.targets, sub.value
        elif isinstance(sub, ast.AnnAssign):
            targets, value = [sub.target], sub.value
        else:
            continue
        if isinstance(value, (ast.List, ast.Tuple)) and any(
            isinstance(t, ast.Name) and t.id in NAME_LISTS for t in targets
        ):
            found.append(value)
    return found


def _references(node: ast.AST) -> set[str]:
    listed = {id(element) for value in name_lists(node) for element in value.elts}
    names = set()
    for sub in walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif id(sub) in listed:
            continue
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.isidentifier():
            # Forward references in annotations and string-keyed registries.
            names.add(sub.value)
    return names


def _class_references(node: ast.ClassDef, plan: Plan) -> set[str]:
    """A modified class's names: its kept upstream statements plus every patch applied to it."""
    overridden = set(plan.methods.get(node.name, {}))
    refs = set()
    for expr in [*node.bases, *node.keywords, *node.decorator_list]:
        refs |= _references(expr)
    for stmt in node.body:
        if not (isinstance(stmt, FUNCTION_NODES) and stmt.name in overridden):
            refs |= _references(stmt)
    patches = [*plan.methods.get(node.name, {}).values(), *plan.added_methods.get(node.name, [])]
    if node.name in plan.init_extras:
        patches.append(plan.init_extras[node.name])
    for resolved in patches:
        refs |= _references(resolved.source.node) if resolved.source else set()
    return refs


def member_references(index: ModuleIndex, plan: Plan) -> dict[str, set[str]]:
    """Top-level name -> names its emitted code uses; module-level statements pool under ROOTS."""
    refs: dict[str, set[str]] = {ROOTS: set()}
    modified = plan.modified_classes()
    for node in index.tree.body:
        names = defined_names(node)
        if not names:
            if not isinstance(node, IMPORT_NODES):
                refs[ROOTS] |= _references(node)
            continue
        for name in names:
            replaced = plan.replaced.get(name)
            if replaced is not None:
                found = _references(replaced.source.node) if replaced.source else set()
            elif name in modified and isinstance(node, ast.ClassDef):
                found = _class_references(node, plan)
            else:
                found = _references(node)
            refs[name] = found - {name}
    refs.pop("__all__", None)
    return refs


def exclusion_effects(index: ModuleIndex, plan: Plan) -> tuple[set[str], list[tuple[str, str]]]:
    """The members dropped (the excluded classes plus every private member reachable only through
    them) and each (kept member, excluded class it still uses), kept members in name order.

    A kept use means the output would not import; ``ROOTS`` as the member stands for module-level code.
    """
    excluded = plan.excluded
    if not excluded:
        return set(), []
    refs = member_references(index, plan)
    candidates: set[str] = set()
    stack = list(excluded)
    while stack:
        name = stack.pop()
        if name in candidates or name not in refs:
            continue
        candidates.add(name)
        stack.extend(refs[name])
    reachable: set[str] = set()
    # Kept roots: every member the excluded classes do not use, plus upstream's public API
    # (``__all__``): a public class stays even when only an excluded class refers to it.
    stack = [n for n in refs if n not in candidates] + sorted(index.public_names - set(excluded))
    while stack:
        name = stack.pop()
        if name in reachable or name in excluded:
            continue
        reachable.add(name)
        stack.extend(refs.get(name, ()))
    dropped = (candidates - reachable) | set(excluded)
    still_used = [(name, user) for name in sorted(reachable) for user in sorted(refs.get(name, set()) & set(excluded))]
    return dropped, still_used
