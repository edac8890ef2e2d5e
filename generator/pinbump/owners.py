"""Who owns a finding: the config line, snippet, recipe or generator code that must change for it.

A pin bump breaks a model in one place, and that place is rarely the model's own config: most patches come
from shared snippets applied by a recipe. The report names the owner, so a maintainer edits one snippet for
the eight models it breaks, and sees which findings one edit answers.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from modelgraft.generator.discovery import LoadedConfig
from modelgraft.generator.dsl.patches import SnippetRef

#: Where the parts of the generator live, relative to the project root: the owner's kind by its folder.
_KINDS = (("generator/snippets/", "snippet"), ("generator/recipes/", "recipe"), ("generator/", "generator"))


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _kind(relative: str, config_file: str) -> str:
    if relative == config_file:
        return "config"
    return next((kind for prefix, kind in _KINDS if relative.startswith(prefix)), "helper")


def _body_for(loaded: LoadedConfig, target: str | None) -> Any:
    """What the config wrote for ``target``: the body of its patch (or of its class's), or the helper of that
    name; None where nothing of the config stands for it."""
    if not target:
        return None
    patches = {patch.target: patch for patch in loaded.config.patches}
    patch = patches.get(target) or patches.get(target.split(".", 1)[0])
    if patch is not None:
        return patch.body
    helpers = {getattr(helper.body, "__name__", None): helper.body for helper in loaded.config.helpers}
    return helpers.get(target)


def owner_of(loaded: LoadedConfig, target: str | None, root: Path) -> str:
    """``<kind> <file>[:<line>]`` of what must change for a finding on ``target`` of ``loaded``.

    The kind is ``snippet`` (a Jinja snippet a recipe applied), ``recipe``, ``config`` (a line of the
    model's own config), ``generator`` or ``helper`` (a project module a config imports). A finding on a
    helper the config added is the helper's; one with no target, or one nothing of the config stands for,
    belongs to the config file.
    """
    config_file = _relative(loaded.path, root)
    body = _body_for(loaded, target)
    if isinstance(body, SnippetRef):
        return f"snippet generator/snippets/{body.name}.py.j2"
    try:
        source = inspect.getsourcefile(body) if body is not None else None
        line = inspect.getsourcelines(body)[1] if body is not None else None
    except (OSError, TypeError):
        source, line = None, None
    if source is None:
        return f"config {config_file}"
    relative = _relative(Path(source), root)
    return f"{_kind(relative, config_file)} {relative}:{line}"
