"""``scaffold-conflicts``: fail while a Copier update left a conflict in a scaffold (the pre-commit hook).

A scaffold is a directory with a ``.copier-answers.yml`` tracked by git. ``copier update`` leaves a
conflict as ``<<<<<<<`` / ``>>>>>>>`` markers, a ``.rej`` file or an unmerged index entry and exits 0
(``modelgraft.scaffold.conflicts``); this command finds them in every scaffold of the repository, or in the ones
named, without changing anything.

Exit statuses (``modelgraft.generator.entrypoint``, shared by every console script): 0 no conflict, 1 a conflict
(each file to resolve is listed), 2 bad input (not inside a git repository, a directory that is not a
scaffold), 3 a bug (a traceback is printed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from modelgraft.generator.entrypoint import ExitStatus, run_script
from modelgraft.scaffold.conflicts import find_conflicts
from modelgraft.scaffold.errors import ScaffoldError
from modelgraft.scaffold.folders import ANSWERS_FILE, chosen_scaffolds, tracked_scaffolds
from modelgraft.scaffold.git import toplevel


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaffold-conflicts",
        description="Exit 1 if a Copier update left a conflict (markers, .rej, unmerged) in a scaffold.",
    )
    parser.add_argument(
        "scaffolds",
        nargs="*",
        type=Path,
        metavar="SCAFFOLD_DIR",
        help=f"scaffolds to check (default: every directory with a tracked {ANSWERS_FILE})",
    )
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """``scaffold-conflicts argv``: 1 while a scaffold holds what a conflicting update left, else 0."""
    args = build_parser().parse_args(argv)
    start = Path.cwd()
    root = toplevel(start, error=ScaffoldError)
    chosen = chosen_scaffolds(root, args.scaffolds, start=start, every=tracked_scaffolds)
    conflicts = [c for d in chosen for c in find_conflicts(root, d)]
    for conflict in conflicts:
        print(f"{conflict.path}: {conflict.reason}")
    if conflicts:
        print(
            f"scaffold-conflicts: {len(conflicts)} file(s) with an unresolved template update; resolve and commit",
            file=sys.stderr,
        )
        return ExitStatus.FINDINGS
    return ExitStatus.OK


def main(argv: Sequence[str] | None = None) -> int:
    """The ``scaffold-conflicts`` console script: :func:`run` under the shared exit-status handler."""
    return run_script("scaffold-conflicts", lambda: run(argv))


if __name__ == "__main__":
    sys.exit(main())
