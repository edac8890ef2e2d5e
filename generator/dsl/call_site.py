"""Where a config called the patch API: the file and line that a misuse of the DSL is reported at.

A misuse is found inside ``modelgraft.generator.dsl`` (or inside a recipe of ``modelgraft.generator.recipes`` that calls it
for the config), but the line to fix is the config's own. The call stack is walked outward to the
first frame whose code lies outside the ``generator`` package: the config's call, or its call of
the recipe that made the bad call.
"""

from __future__ import annotations

import sys
from pathlib import Path

from modelgraft.generator.own_code import GENERATOR_ROOT


def call_site() -> str | None:
    """``<file>:<line>`` of the innermost caller outside ``generator/``; the file relative to the working
    directory when it lies below it. None where every frame is the generator's own."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _inside_generator(filename):
            return f"{_display(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _inside_generator(filename: str) -> bool:
    if filename.startswith("<"):  # <string>, <frozen importlib._bootstrap>: not a file of ours
        return False
    return Path(filename).resolve().is_relative_to(GENERATOR_ROOT)


def _display(filename: str) -> str:
    if filename.startswith("<"):
        return filename
    path = Path(filename).resolve()
    try:
        return path.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)
