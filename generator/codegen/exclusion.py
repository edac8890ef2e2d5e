"""Which upstream members disappear with an excluded class: those only it used."""

from __future__ import annotations

import ast

from generator.upstream.index import ModuleIndex, defined_names


def _references(node: ast.AST) -> set[str]:
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.isidentifier():
            # Forward references in annotations and string-keyed registries.
            names.add(sub.value)
    return names


def dropped_members(index: ModuleIndex, excluded: set[str]) -> set[str]:
    """``excluded`` plus every top-level definition reachable only through them.

    A member survives if anything kept (a kept definition or any other
    top-level statement) reaches it; ``__all__`` does not keep anything alive.
    """
    if not excluded:
        return set()
    refs: dict[str, set[str]] = {}
    roots: set[str] = set()
    for node in index.tree.body:
        names = defined_names(node)
        if not names:
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                roots |= _references(node)
            continue
        for name in names:
            refs[name] = _references(node) - {name}
    if "__all__" in refs:
        del refs["__all__"]
    reachable: set[str] = set()
    frontier = [n for n in refs if n not in excluded] + sorted(roots)
    candidates = set()
    stack = list(excluded)
    while stack:
        name = stack.pop()
        if name in candidates or name not in refs:
            continue
        candidates.add(name)
        stack.extend(refs[name])
    kept_roots = [n for n in frontier if n not in candidates]
    stack = kept_roots
    while stack:
        name = stack.pop()
        if name in reachable or name in excluded:
            continue
        reachable.add(name)
        stack.extend(refs.get(name, ()))
    return (candidates - reachable) | set(excluded)
