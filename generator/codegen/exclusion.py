"""Which upstream members disappear with an excluded class: those only it used.

References are read from the code that will be emitted: a patched member
contributes its patch body's names, not upstream's, so a patch that stops
using a helper lets an exclusion take that helper too.
"""

from __future__ import annotations

import ast

from generator.codegen.plan import Plan
from generator.errors import TargetError
from generator.upstream.index import ModuleIndex, defined_names

ROOTS = "<module statements>"


def _references(node: ast.AST) -> set[str]:
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
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
        if not (isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in overridden):
            refs |= _references(stmt)
    patches = [*plan.methods.get(node.name, {}).values(), *plan.added_methods.get(node.name, [])]
    if node.name in plan.init_extras:
        patches.append(plan.init_extras[node.name])
    for resolved in patches:
        refs |= _references(resolved.source.node) if resolved.source else set()
    return refs


def _public_names(index: ModuleIndex) -> set[str]:
    node = index.members.get("__all__")
    if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple)):
        return {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def member_references(index: ModuleIndex, plan: Plan) -> dict[str, set[str]]:
    """Top-level name -> names its emitted code uses; module-level statements pool under ROOTS."""
    refs: dict[str, set[str]] = {ROOTS: set()}
    modified = plan.modified_classes()
    for node in index.tree.body:
        names = defined_names(node)
        if not names:
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
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


def dropped_members(index: ModuleIndex, plan: Plan) -> set[str]:
    """The excluded classes plus every private member reachable only through them.

    Raises when something kept still uses an excluded class: the output would
    not import, and the message says which member to patch.
    """
    excluded = plan.excluded
    if not excluded:
        return set()
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
    stack = [n for n in refs if n not in candidates] + sorted(_public_names(index) - set(excluded))
    while stack:
        name = stack.pop()
        if name in reachable or name in excluded:
            continue
        reachable.add(name)
        stack.extend(refs.get(name, ()))
    dropped = (candidates - reachable) | set(excluded)
    for name in sorted(reachable):
        users = sorted(refs.get(name, set()) & set(excluded))
        if users:
            who = "module-level code" if name == ROOTS else f"kept member {name}"
            raise TargetError(
                f"excluded class {users[0]} is still used by {who}; patch {name} to stop using it, or keep the class",
                config=plan.config_name,
                target=users[0],
            )
    return dropped
