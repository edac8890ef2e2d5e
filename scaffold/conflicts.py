"""What a ``copier update`` left unresolved in one model directory.

Copier merges a template change into a locally edited file with ``git merge-file`` (inline markers,
the file unmerged in the index) or, with ``--conflict rej``, leaves ``<file>.rej`` next to it; either
way it exits 0. These are the traces it leaves, looked for independently of each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from modelgraft.scaffold.errors import ScaffoldError
from modelgraft.scaffold.git import git_output

#: A line that opens or closes a conflict block: ``<<<<<<< before updating`` / ``>>>>>>> after updating``.
_MARKER = re.compile(rb"^(?:<{7}|>{7})(?: |$)", re.MULTILINE)


@dataclass(frozen=True, order=True)
class Conflict:
    """One file to resolve, relative to the repository root, and why."""

    path: str
    reason: str


def find_conflicts(root: Path, model_dir: Path) -> list[Conflict]:
    """Files under ``model_dir`` (inside the git repository ``root``) that an update left unresolved."""
    found: dict[str, set[str]] = {}

    def add(path: Path, reason: str) -> None:
        found.setdefault(path.relative_to(root).as_posix(), set()).add(reason)

    unmerged = git_output(root, "ls-files", "--unmerged", "-z", "--", str(model_dir), error=ScaffoldError)
    for entry in filter(None, unmerged.split("\0")):
        add(root / entry.split("\t", 1)[1], "unmerged in the git index")
    for path in sorted(model_dir.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        if path.name.endswith(".rej"):
            add(path, "rejected hunks")
        elif _MARKER.search(path.read_bytes()):
            add(path, "conflict markers")
    return sorted(Conflict(path, ", ".join(sorted(reasons))) for path, reasons in found.items())
