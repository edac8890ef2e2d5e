"""Which folders are scaffolds, and which of them a command works on: decided here, once.

A scaffold is a folder holding a ``.copier-answers.yml`` (:data:`ANSWERS_FILE`). ``scaffold-update``
updates the model packages, ``models/<m>`` (:func:`model_scaffolds`); ``scaffold-conflicts``, a pre-commit
hook for any repository, looks wherever git tracks an answers file (:func:`tracked_scaffolds`). Both take
named folders instead through :func:`chosen_scaffolds`, which refuses a folder that is not a scaffold of
the repository.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from modelgraft.scaffold.errors import ScaffoldError
from modelgraft.scaffold.git import git_output

#: Where a scaffold keeps its answers (``_answers_file`` in copier.yml); its presence makes a scaffold.
ANSWERS_FILE = ".copier-answers.yml"


def model_scaffolds(root: Path) -> list[Path]:
    """Every model package of the repository that is a scaffold: ``models/<m>`` with an answers file, sorted."""
    return [answers.parent for answers in sorted(root.glob(f"models/*/{ANSWERS_FILE}"))]


def tracked_scaffolds(root: Path) -> list[Path]:
    """Every folder of the repository whose answers file git tracks, sorted."""
    tracked = git_output(root, "ls-files", "-z", "--", f"*{ANSWERS_FILE}", ANSWERS_FILE, error=ScaffoldError)
    return sorted({(root / rel).parent for rel in tracked.split("\0") if rel.endswith(ANSWERS_FILE)})


def chosen_scaffolds(
    root: Path, named: Sequence[Path], *, start: Path, every: Callable[[Path], list[Path]]
) -> list[Path]:
    """The ``named`` folders (relative to ``start``), each a scaffold of ``root``, or ``every(root)`` if none.

    Raises :class:`ScaffoldError` naming the first folder that is outside ``root`` or has no answers file.
    """
    if not named:
        return every(root)
    dirs = [(start / d).resolve() for d in named]
    for d in dirs:
        if not d.is_relative_to(root) or not (d / ANSWERS_FILE).is_file():
            raise ScaffoldError(f"{d} is not a scaffold of {root} (no {ANSWERS_FILE})")
    return list(dict.fromkeys(dirs))
