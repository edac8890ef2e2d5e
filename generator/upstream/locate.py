"""Find upstream source files by dotted module name without importing them.

``importlib.util.find_spec`` on a top-level name only locates the package; the
rest of the path is walked on disk, so no ``__init__`` of transformers runs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from modelgraft.generator.errors import UpstreamError
from modelgraft.generator.installed import installed_version


def package_root(top_level: str) -> Path:
    """The folder of the installed package ``top_level`` (not cached: a run's context keeps what it found)."""
    spec = importlib.util.find_spec(top_level)
    if spec is None or not spec.submodule_search_locations:
        raise UpstreamError(f"package {top_level!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def module_path(module: str, root: Path | None = None) -> Path:
    """The .py file of ``module`` (a package resolves to its ``__init__.py``).

    ``root`` is the folder holding the top-level package, when it is not the
    installed one (an unpacked wheel of another version, for pin bumps).
    """
    top = module.partition(".")[0]
    found = find_module(module, root if root is not None else package_root(top).parent)
    if found is None:
        base = root / top if root is not None else package_root(top)
        raise UpstreamError(f"module {module!r} not found under {base}")
    return found


def find_module(module: str, root: Path) -> Path | None:
    """The .py file of ``module`` below ``root`` (the folder holding its top-level package), or None.

    One rule for upstream modules and for a project's own (a config's imports): ``a.b`` is
    ``a/b.py`` or the package ``a/b/__init__.py``.
    """
    candidate = root.joinpath(*module.split("."))
    for path in (candidate.with_suffix(".py"), candidate / "__init__.py"):
        if path.is_file():
            return path
    return None


def distribution_version(top_level: str) -> str:
    """Version of the installed distribution that provides ``top_level``."""
    version = installed_version(top_level)
    if version is None:
        raise UpstreamError(f"no installed distribution named {top_level!r}")
    return version


def resolve_relative(module: str, level: int, name: str | None, *, is_package: bool = False) -> str:
    """Absolute module name for ``from <level dots><name> import ...`` inside ``module``."""
    parts = module.split(".")
    package = parts if is_package else parts[:-1]
    if level > len(package):
        raise UpstreamError(f"relative import beyond top-level package in {module}")
    base = package[: len(package) - level + 1]
    return ".".join(base + ([name] if name else []))
