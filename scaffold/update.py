"""``scaffold-update``: ``copier update`` on every scaffolded model; a conflict makes the command fail.

Copier itself reports a conflicting update by leaving markers (or ``.rej`` files) behind and exiting 0.
This command runs the update on each ``models/<m>/`` that has a ``.copier-answers.yml``, looks for what
Copier left unresolved (``scaffold.conflicts``) and fails with a report naming the model and its files.

Exit codes: 0 every scaffold was updated cleanly or was current; 1 an update left a conflict or failed;
2 nothing was updated (not inside a repository with ``copier.yml``, no version tag, an unknown
``--vcs-ref``, a directory that is not a scaffold, a scaffold with uncommitted changes or one copied from a
template version the repository lacks).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from copier import run_update
from copier.errors import CopierError
from packaging.version import InvalidVersion, Version
from plumbum import ProcessExecutionError

from scaffold.conflicts import Conflict, find_conflicts

EXIT_OK, EXIT_CONFLICT, EXIT_ERROR = 0, 1, 2

#: Where a scaffold keeps its answers (``_answers_file`` in copier.yml); its presence makes a scaffold.
ANSWERS_FILE = ".copier-answers.yml"


class ScaffoldError(Exception):
    """Bad input, found before anything is updated (exit 2)."""


@dataclass(frozen=True)
class Plan:
    """What to update: the repository (the template's source), the scaffolds, the template version."""

    root: Path
    model_dirs: tuple[Path, ...]
    #: A commit to update to, or None for Copier's default (the repository's latest version tag).
    vcs_ref: str | None


@dataclass
class Outcome:
    """How the update of one scaffold went."""

    model_dir: str
    before: str | None
    after: str | None = None
    conflicts: list[Conflict] = field(default_factory=list)
    error: str | None = None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaffold-update",
        description=(
            "Run `copier update` on every scaffolded model (models/*/" + ANSWERS_FILE + ") and fail if an update "
            "leaves a conflict."
        ),
    )
    parser.add_argument(
        "model_dirs",
        nargs="*",
        type=Path,
        metavar="MODEL_DIR",
        help="scaffolds to update (default: every models/<m> with a " + ANSWERS_FILE + ")",
    )
    parser.add_argument(
        "--vcs-ref",
        metavar="REF",
        help="template version to update to: a tag or commit of this repository (default: its latest version tag)",
    )
    parser.add_argument(
        "--conflict",
        choices=("inline", "rej"),
        default="inline",
        help="how Copier leaves a conflict: markers in the file (default) or a .rej file next to it",
    )
    return parser


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, check=False, capture_output=True, text=True)


def _answers(model_dir: Path) -> dict:
    return yaml.safe_load((model_dir / ANSWERS_FILE).read_text(encoding="utf-8")) or {}


def _is_release(tag: str) -> bool:
    """A tag Copier takes as a template version: PEP 440, not a pre-release (as ``copier._vcs.get_latest_tag``)."""
    try:
        return not Version(tag).is_prerelease
    except InvalidVersion:
        return False


def _commit_exists(root: Path, ref: str) -> str | None:
    result = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    return result.stdout.strip() if result.returncode == 0 else None


def make_plan(start: Path, model_dirs: Sequence[Path] = (), vcs_ref: str | None = None) -> Plan:
    """Check everything that can be checked before touching a file; raise :class:`ScaffoldError` otherwise."""
    found = _git(start, "rev-parse", "--show-toplevel")
    if found.returncode != 0:
        raise ScaffoldError(f"{start} is not inside a git repository")
    root = Path(found.stdout.strip()).resolve()
    if not (root / "copier.yml").is_file():
        raise ScaffoldError(f"{root} has no copier.yml: run scaffold-update inside the modelgraft repository")

    if vcs_ref is None:
        if not any(_is_release(tag) for tag in _git(root, "tag", "--list").stdout.split()):
            raise ScaffoldError(
                "the repository has no version tag (PEP 440, e.g. v0.1.0), and Copier takes the template from the "
                "latest one: tag the commit that holds the template, or pass --vcs-ref"
            )
    else:
        # A commit id, never HEAD: Copier would fold uncommitted changes into a throwaway commit for HEAD and
        # record that commit, which the repository never gets, as the scaffold's template version.
        commit = _commit_exists(root, vcs_ref)
        if commit is None:
            raise ScaffoldError(f"--vcs-ref {vcs_ref}: no such tag or commit in {root}")
        vcs_ref = commit

    if model_dirs:
        dirs = [(start / d).resolve() for d in model_dirs]
        for d in dirs:
            if not d.is_relative_to(root) or not (d / ANSWERS_FILE).is_file():
                raise ScaffoldError(f"{d} is not a scaffold of {root} (no {ANSWERS_FILE})")
    else:
        dirs = [answers.parent for answers in sorted(root.glob(f"models/*/{ANSWERS_FILE}"))]

    problems = []
    for d in dirs:
        rel = d.relative_to(root).as_posix()
        if _git(root, "status", "--porcelain", "--", rel).stdout.strip():
            problems.append(f"{rel}: uncommitted changes; commit or stash them first")
            continue
        commit = _answers(d).get("_commit")
        if not commit or _commit_exists(root, str(commit)) is None:
            problems.append(
                f"{rel}: copied from template version {commit!r}, which this repository does not have "
                "(a copy from uncommitted template changes?); copy it again from a committed, tagged template"
            )
    if problems:
        raise ScaffoldError("nothing was updated:\n  " + "\n  ".join(problems))
    return Plan(root, tuple(dict.fromkeys(dirs)), vcs_ref)


@contextmanager
def _working_directory(path: Path) -> Iterator[None]:
    """Copier resolves a scaffold's ``_src_path: .`` against the working directory: the repository root."""
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def update_all(plan: Plan, *, conflict: str = "inline") -> tuple[list[Outcome], list[str]]:
    """Update the planned scaffolds in order; stop after the first conflict (outcomes, dirs not attempted).

    A conflict leaves files unmerged in the git index, and Copier cannot update another scaffold of the same
    repository until they are resolved and committed.
    """
    outcomes: list[Outcome] = []
    for index, model_dir in enumerate(plan.model_dirs):
        rel = model_dir.relative_to(plan.root).as_posix()
        outcome = Outcome(rel, before=_answers(model_dir).get("_commit"))
        try:
            with _working_directory(plan.root):
                run_update(
                    dst_path=rel,
                    vcs_ref=plan.vcs_ref,
                    defaults=True,
                    overwrite=True,
                    unsafe=True,  # the project's own template, as `copier update --trust`
                    quiet=True,
                    conflict=conflict,
                )
        except (CopierError, ValueError, OSError, subprocess.CalledProcessError, ProcessExecutionError) as error:
            outcome.error = f"{type(error).__name__}: {error}".strip()
        outcome.after = _answers(model_dir).get("_commit")
        outcome.conflicts = find_conflicts(plan.root, model_dir)
        outcomes.append(outcome)
        if outcome.conflicts:
            rest = [d.relative_to(plan.root).as_posix() for d in plan.model_dirs[index + 1 :]]
            return outcomes, rest
    return outcomes, []


def report(outcomes: Sequence[Outcome], not_attempted: Sequence[str]) -> int:
    """Print one line (and the files to resolve) per scaffold; return the exit code."""
    for outcome in outcomes:
        versions = f"template {outcome.before} -> {outcome.after}"
        if outcome.conflicts:
            print(f"{outcome.model_dir}: CONFLICT ({versions}); resolve:")
            for conflict in outcome.conflicts:
                print(f"  {conflict.path}  ({conflict.reason})")
        elif outcome.error:
            print(f"{outcome.model_dir}: FAILED ({versions}): {outcome.error}")
        elif outcome.before != outcome.after:
            print(f"{outcome.model_dir}: updated ({versions})")
        else:
            print(f"{outcome.model_dir}: current (template {outcome.after})")
    for model_dir in not_attempted:
        print(f"{model_dir}: not updated: resolve and commit the conflict above first")

    conflicted = sum(1 for o in outcomes if o.conflicts)
    failed = sum(1 for o in outcomes if o.error and not o.conflicts)
    if conflicted or failed:
        print(
            f"scaffold-update: {conflicted} scaffold(s) with conflicts, {failed} failed. Edit the files listed above "
            "(remove the <<<<<<< / >>>>>>> blocks, or apply and delete the .rej files), `git add` them, commit, "
            "then run scaffold-update again",
            file=sys.stderr,
        )
        return EXIT_CONFLICT
    if not outcomes:
        print(f"no scaffolds (models/*/{ANSWERS_FILE}) to update")
    elif any(o.before != o.after for o in outcomes):
        print("regenerate (generate-all), run the tests, review `git diff` and commit")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        planned = make_plan(Path.cwd(), args.model_dirs, args.vcs_ref)
    except ScaffoldError as error:
        print(f"scaffold-update: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    outcomes, not_attempted = update_all(planned, conflict=args.conflict)
    return report(outcomes, not_attempted)


if __name__ == "__main__":
    sys.exit(main())
