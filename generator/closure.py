"""A config's input files: its own module and every project module it imports, transitively."""

from __future__ import annotations

import ast
from pathlib import Path

from modelgraft.generator.errors import UpstreamError
from modelgraft.generator.own_code import GENERATOR_ROOT
from modelgraft.generator.upstream.locate import find_module, resolve_relative


def project_closure(path: Path, root: Path) -> list[Path]:
    """``path`` and every project module it imports, transitively: the config's input files.

    Follows absolute and relative imports and ``from package import module``
    forms. A package's ``__init__`` counts only when names are imported from
    it, not merely because a module below it was imported, so registering a
    new model in ``models/__init__.py`` is not an input of every config.
    """
    seen: list[Path] = []
    stack = [path.resolve()]
    while stack:
        current = stack.pop()
        if current in seen or not current.is_file():
            continue
        seen.append(current)
        for name in _imported_modules(current, root):
            file = _project_file(name, root) if name else None
            # The generator's own code is not a config input: the check cache keys on it separately.
            if file is not None and GENERATOR_ROOT not in file.parents:
                stack.append(file)
    return sorted(seen)


def _project_file(module: str, root: Path) -> Path | None:
    found = find_module(module, root)
    return found.resolve() if found is not None else None


def _imported_modules(file: Path, root: Path) -> list[str]:
    """Modules ``file`` imports; ``from p import m`` names the module ``p.m`` when it is one."""
    rel = file.relative_to(root).with_suffix("")
    is_package = file.name == "__init__.py"
    module = ".".join(rel.parts[:-1] if is_package else rel.parts)
    modules: list[str] = []
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                try:
                    base = resolve_relative(module, node.level, node.module, is_package=is_package)
                except UpstreamError:  # beyond the project's top: not a project module
                    continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}" if base else alias.name
                modules.append(submodule if find_module(submodule, root) else base)
    return modules
