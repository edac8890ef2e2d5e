"""``scaffold-update``: bring every scaffolded model to the current template version; a conflict fails.

The template version is a commit id, never a tag (tags do not travel with this repository's clones):
the last commit that changed ``copier.yml`` or ``template/`` (``modelgraft.scaffold.versions``). Each scaffold
(``models/<m>/`` with a ``.copier-answers.yml``) records the version it was rendered from as ``_commit``.
For each scaffold this command

- does nothing when it records the current version (``current``): an update in a clone where
  everything is current changes no file;
- rewrites the ``_commit`` line only when it records another commit holding the same template (an
  abbreviated id, or ``HEAD`` of a plain ``copier copy`` / ``copier update``): the full id is what the
  template drift check expects;
- otherwise runs ``copier update`` to the current version (``--vcs-ref`` picks another), then records
  its full id. Copier reports a conflicting update by leaving markers (or ``.rej`` files) behind and
  exiting 0; this command looks for them (``modelgraft.scaffold.conflicts``) and fails, naming the files.

``--adopt`` records the current version in scaffolds whose recorded version this repository lacks (the
old ``v0.1.0`` tag), without rendering anything: for scaffolds known to match the current template.
``--check`` changes nothing and fails when a scaffold does not record the current version.

Exit statuses (``modelgraft.generator.entrypoint``, shared by every console script): 0 every scaffold is current or
was updated cleanly; 1 an update left a conflict (``--check``: a scaffold is not current); 2 bad input:
nothing was changed (not inside a repository with ``copier.yml``, no commit holding the template, an
unknown ``--vcs-ref``, a directory that is not a scaffold, a scaffold to update with uncommitted changes,
one that records a template version this repository lacks or that is not in the history of the version
to update to), or Copier or git could not carry out an update (the scaffolds before it are updated, the
one named may be partly); 3 a bug in scaffold-update (a traceback is printed).
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from copier import run_update
from copier.errors import CopierError
from plumbum import ProcessExecutionError

from modelgraft.generator.entrypoint import ExitStatus, run_script
from modelgraft.scaffold import versions
from modelgraft.scaffold.conflicts import Conflict, find_conflicts
from modelgraft.scaffold.errors import ScaffoldError
from modelgraft.scaffold.folders import ANSWERS_FILE, chosen_scaffolds, model_scaffolds
from modelgraft.scaffold.versions import TEMPLATE_PATHS

#: The statuses scaffold-update returns (``modelgraft.generator.entrypoint``), under the names its tests know them by.
EXIT_OK, EXIT_CONFLICT, EXIT_ERROR, EXIT_BUG = (
    ExitStatus.OK,
    ExitStatus.FINDINGS,
    ExitStatus.BAD_INPUT,
    ExitStatus.INTERNAL,
)

#: What scaffold-update does to one scaffold: nothing, rewrite its ``_commit`` line, or ``copier update``.
Action = Literal["current", "record", "adopt", "update"]


@dataclass(frozen=True)
class Step:
    """One scaffold, what it records and what to do with it."""

    model_dir: Path
    rel: str
    recorded: str | None
    #: The full id of the recorded version; None where the repository lacks it (``--adopt`` only).
    recorded_commit: str | None
    action: Action


@dataclass(frozen=True)
class Plan:
    """What to do: the repository (the template's source), the template version, one step per scaffold."""

    root: Path
    #: The full id of the template version every scaffold will record.
    version: str
    steps: tuple[Step, ...]
    #: ``git status`` lines of template changes no commit holds: they are not passed on.
    uncommitted: tuple[str, ...] = ()


@dataclass
class Outcome:
    """How one scaffold went."""

    model_dir: str
    action: Action
    before: str | None
    after: str | None = None
    conflicts: list[Conflict] = field(default_factory=list)
    error: str | None = None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaffold-update",
        description=(
            "Bring every scaffolded model (models/*/" + ANSWERS_FILE + ") to the current template version (the "
            "last commit that changed " + " or ".join(TEMPLATE_PATHS) + "/) with `copier update`; fail if an "
            "update leaves a conflict."
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
        help=(
            "update to the template as of this commit or branch (recorded as the last commit up to REF that "
            "changed the template; default: HEAD)"
        ),
    )
    parser.add_argument(
        "--conflict",
        choices=("inline", "rej"),
        default="inline",
        help="how Copier leaves a conflict: markers in the file (default) or a .rej file next to it",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--adopt",
        action="store_true",
        help=(
            "render nothing; record the template version in scaffolds that record one this repository lacks "
            "(such as the old v0.1.0 tag): for scaffolds that match the current template"
        ),
    )
    mode.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if a scaffold does not record the current template version",
    )
    return parser


def _short(version: str | None) -> str:
    """A commit id as reports show it (12 digits); anything else as it is."""
    if version and len(version) == 40 and all(c in "0123456789abcdef" for c in version):
        return version[:12]
    return str(version)


def _find_root(start: Path) -> Path:
    """The repository holding ``start``: the one whose scaffolds are updated."""
    found = versions.git(start, "rev-parse", "--show-toplevel")
    if found.returncode != 0:
        raise ScaffoldError(f"{start} is not inside a git repository")
    return Path(found.stdout.strip()).resolve()


def _template_repository(root: Path) -> Path:
    """The repository of the template the scaffolds of ``root`` were copied from.

    modelgraft itself holds its template (``copier.yml``). A training repository's scaffolds record where they
    were copied from (``_src_path``): one local git repository of modelgraft, whose history gives the template
    versions. A source given as a URL is refused, naming the way out: a local clone of it.
    """
    if (root / "copier.yml").is_file():
        return root
    sources = {}
    for model_dir in model_scaffolds(root):
        answers = yaml.safe_load((model_dir / ANSWERS_FILE).read_text(encoding="utf-8")) or {}
        sources[model_dir.relative_to(root).as_posix()] = str(answers.get("_src_path", ""))
    if not sources:
        raise ScaffoldError(f"{root} has no copier.yml and no scaffolds (models/*/{ANSWERS_FILE}) to update")
    found = set(sources.values())
    if len(found) > 1:
        listed = ", ".join(f"{rel}: {source}" for rel, source in sorted(sources.items()))
        raise ScaffoldError(f"the scaffolds of {root} were copied from several templates ({listed}): one at a time")
    source = found.pop()
    template = (root / source).resolve() if source else None
    if template is None or not (template / "copier.yml").is_file() or versions.resolve(template, "HEAD") is None:
        raise ScaffoldError(
            f"the scaffolds of {root} were copied from {source!r}, which is not a local git repository of the "
            "template here: clone modelgraft, and copier copy from that clone (its path is recorded as _src_path)"
        )
    return template


def _target_version(root: Path, vcs_ref: str | None) -> str:
    ref = "HEAD" if vcs_ref is None else vcs_ref
    commit = versions.resolve(root, ref)
    if commit is None:
        if vcs_ref is None:
            raise ScaffoldError(f"{root} has no commit yet: commit the template first")
        raise ScaffoldError(f"--vcs-ref {vcs_ref}: no such commit or branch in {root}")
    version = versions.template_version(root, commit)
    if version is None:
        where = "HEAD" if vcs_ref is None else f"--vcs-ref {vcs_ref}"
        shallow = " (a shallow clone: git fetch --unshallow)" if versions.is_shallow(root) else ""
        raise ScaffoldError(
            f"no commit up to {where} changed {' or '.join(TEMPLATE_PATHS)}/{shallow}: commit the template first"
        )
    return version


def _scaffold_dirs(root: Path, start: Path, model_dirs: Sequence[Path]) -> list[Path]:
    return chosen_scaffolds(root, model_dirs, start=start, every=model_scaffolds)


def _plan_step(
    root: Path, template: Path, model_dir: Path, version: str, adopt: bool
) -> tuple[Step | None, str | None]:
    """What to do with one scaffold of ``root`` copied from ``template``, or why nothing can be done (exit 2)."""
    rel = model_dir.relative_to(root).as_posix()
    recorded = versions.recorded_version(model_dir)
    if recorded == version:
        return Step(model_dir, rel, recorded, version, "current"), None
    commit = versions.resolve(template, recorded) if recorded else None
    if commit is not None and versions.same_template(template, commit, version):
        # The template is the same on both sides: nothing to render, only the id to write in full.
        return Step(model_dir, rel, recorded, commit, "record"), None
    if adopt:
        if commit is not None:
            return None, (
                f"{rel}: records template version {recorded!r}, a commit of this repository with another "
                "template: update it (scaffold-update without --adopt) rather than adopt it"
            )
        return Step(model_dir, rel, recorded, None, "adopt"), None
    if commit is None:
        return None, (
            f"{rel}: records template version {recorded!r}, which this repository lacks (a tag: tags do not "
            "travel with clones; or a commit Copier made of uncommitted changes). If the scaffold matches the "
            f"current template, record it with `scaffold-update --adopt {rel}`; otherwise copy it again"
        )
    if not versions.is_ancestor(template, commit, version):
        return None, (
            f"{rel}: records template version {_short(commit)}, which is not in the history of template "
            f"version {_short(version)}: an update cannot go back, nor across branches (pass --vcs-ref)"
        )
    if versions.git(root, "status", "--porcelain", "--untracked-files=all", "--", rel).stdout.strip():
        return None, f"{rel}: uncommitted changes; commit or stash them first (the update merges from a commit)"
    return Step(model_dir, rel, recorded, commit, "update"), None


def make_plan(
    start: Path, model_dirs: Sequence[Path] = (), vcs_ref: str | None = None, *, adopt: bool = False
) -> Plan:
    """Check everything that can be checked before touching a file; raise :class:`ScaffoldError` otherwise."""
    root = _find_root(start)
    template = _template_repository(root)
    version = _target_version(template, vcs_ref)
    dirs = _scaffold_dirs(root, start, model_dirs)
    steps, problems = [], []
    for model_dir in dirs:
        step, problem = _plan_step(root, template, model_dir, version, adopt)
        if problem:
            problems.append(problem)
        else:
            steps.append(step)
    if problems:
        raise ScaffoldError("nothing was changed:\n  " + "\n  ".join(problems))
    return Plan(root, version, tuple(steps), tuple(versions.uncommitted_template_changes(template)))


@contextmanager
def _working_directory(path: Path) -> Iterator[None]:
    """Copier resolves a scaffold's ``_src_path: .`` against the working directory: the repository root."""
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


#: Modules that template versions recorded before the project installed as ``modelgraft`` name as their Jinja
#: extension (``_jinja_extensions: scaffold.jinja_extension.ScaffoldExtension``), with the module they are now.
#: An update renders the recorded version too, so these names must still import.
_EXTENSIONS_BY_OLD_NAME = {
    "scaffold": "modelgraft.scaffold",
    "scaffold.jinja_extension": "modelgraft.scaffold.jinja_extension",
}


@contextmanager
def _old_extension_names() -> Iterator[None]:
    """The pre-namespace extension modules importable under their old names, for the length of an update.

    Aliases in ``sys.modules`` of the modules installed now, so the old and the new template version render
    with the same extension code (docs/scaffolding.md, "Which template version": that code is not
    versioned); removed again afterwards, so nothing else imports the old names by accident.
    """
    added = [old for old in _EXTENSIONS_BY_OLD_NAME if old not in sys.modules]
    for old in added:
        sys.modules[old] = importlib.import_module(_EXTENSIONS_BY_OLD_NAME[old])
    try:
        yield
    finally:
        for old in added:
            sys.modules.pop(old, None)


def _copier_update(plan: Plan, step: Step, conflict: str) -> None:
    with _working_directory(plan.root), _old_extension_names():
        run_update(
            dst_path=step.rel,
            # A full commit id, never HEAD: for HEAD, Copier would fold uncommitted changes of the working
            # tree into a throwaway commit of its own and render (and record) that.
            vcs_ref=plan.version,
            defaults=True,
            overwrite=True,
            unsafe=True,  # the project's own template, as `copier update --trust`
            quiet=True,
            conflict=conflict,
        )


def update_all(plan: Plan, *, conflict: str = "inline") -> tuple[list[Outcome], list[str]]:
    """Carry out the plan in order; stop after the first conflict or failure (outcomes, scaffolds not attempted).

    A conflict leaves files unmerged in the git index, and Copier cannot update another scaffold of the same
    repository until they are resolved and committed; a failure of Copier or git (a broken answers file, a
    locked index) would most likely fail the next scaffold the same way.
    """
    outcomes: list[Outcome] = []
    for index, step in enumerate(plan.steps):
        outcome = Outcome(step.rel, step.action, before=step.recorded)
        if step.action == "update":
            try:
                _copier_update(plan, step, conflict)
            except (CopierError, ValueError, OSError, subprocess.CalledProcessError, ProcessExecutionError) as error:
                outcome.error = _failure(error)
            outcome.conflicts = find_conflicts(plan.root, step.model_dir)
        if step.action != "current" and outcome.error is None:
            # Copier records `git describe --tags --always`: an abbreviated id, or a name of a local tag.
            versions.record_version(step.model_dir, plan.version)
        outcome.after = versions.recorded_version(step.model_dir)
        outcomes.append(outcome)
        if outcome.conflicts or outcome.error:
            return outcomes, [s.rel for s in plan.steps[index + 1 :]]
    return outcomes, []


def _failure(error: Exception) -> str:
    """What went wrong, in one line: the exception and, for a command that failed, what it said on stderr."""
    stderr = getattr(error, "stderr", None)
    said = f" ({stderr.strip()})" if isinstance(stderr, str) and stderr.strip() else ""
    return f"{type(error).__name__}: {str(error).strip().rstrip('.')}{said}"


def report(plan: Plan, outcomes: Sequence[Outcome], not_attempted: Sequence[str]) -> int:
    """Print one line (and the files to resolve) per scaffold; return the exit status.

    A conflict is 1. An update that Copier or git could not carry out is bad input of the environment, not a
    conflict: :class:`ScaffoldError` (2), naming the scaffold and the cause.
    """
    if plan.uncommitted:
        print(
            f"scaffold-update: note: the template has uncommitted changes; scaffolds get the committed template "
            f"{_short(plan.version)}, without them (commit them first to pass them on):\n  "
            + "\n  ".join(plan.uncommitted),
            file=sys.stderr,
        )
    for outcome in outcomes:
        span = f"template {_short(outcome.before)} -> {_short(outcome.after)}"
        if outcome.conflicts:
            print(f"{outcome.model_dir}: CONFLICT ({span}); resolve:")
            for conflict in outcome.conflicts:
                print(f"  {conflict.path}  ({conflict.reason})")
        elif outcome.error:
            print(f"{outcome.model_dir}: FAILED ({span}): {outcome.error}")
        elif outcome.action == "update":
            print(f"{outcome.model_dir}: updated ({span})")
        elif outcome.action == "adopt":
            print(f"{outcome.model_dir}: adopted at template {outcome.after} (recorded {outcome.before!r})")
        elif outcome.action == "record":
            print(f"{outcome.model_dir}: current, recorded as {outcome.after} (was {outcome.before!r})")
        else:
            print(f"{outcome.model_dir}: current (template {_short(outcome.after)})")
    conflicted = [o for o in outcomes if o.conflicts]
    failed = [o for o in outcomes if o.error and not o.conflicts]
    blocker = "resolve and commit the conflict" if conflicted else "fix the failure"
    for model_dir in not_attempted:
        print(f"{model_dir}: not updated: {blocker} above first")

    if conflicted:
        print(
            f"scaffold-update: {len(conflicted)} scaffold(s) with conflicts. Edit the files listed above "
            "(remove the <<<<<<< / >>>>>>> blocks, or apply and delete the .rej files), `git add` them, commit, "
            "then run scaffold-update again",
            file=sys.stderr,
        )
        return EXIT_CONFLICT
    if failed:
        raise ScaffoldError(
            f"{failed[0].model_dir}: copier update failed: {failed[0].error}. Its files may be partly updated "
            "(see `git status`); fix the cause and run scaffold-update again"
        )
    if not outcomes:
        print(f"no scaffolds (models/*/{ANSWERS_FILE}) to update")
    elif any(o.action == "update" for o in outcomes):
        print(
            "regenerate (generate-all), run the tests, review `git diff` and commit the scaffolds, without "
            "template changes in the same commit"
        )
    elif any(o.action != "current" for o in outcomes):
        print("commit the answers files")
    return EXIT_OK


def check(start: Path) -> int:
    """``--check``: exit 1 if a scaffold does not record the current template version; change nothing."""
    root = _find_root(start)
    template = _template_repository(root)
    try:
        drifted = versions.drifted(root, template)
    except ValueError as error:
        raise ScaffoldError(str(error)) from None
    if not drifted:
        print(f"every scaffold records the current template version {versions.template_version(template)}")
        return EXIT_OK
    current = versions.template_version(template)
    for rel, recorded in drifted.items():
        print(f"{rel}: records template {recorded!r}, not the current {current}")
    print("scaffold-update: run scaffold-update and commit the scaffolds it changes", file=sys.stderr)
    return EXIT_CONFLICT


def run(argv: Sequence[str] | None = None) -> int:
    """``scaffold-update argv``: 0 current or updated, 1 a conflict (``--check``: a scaffold not current)."""
    args = build_parser().parse_args(argv)
    if args.check:
        return check(Path.cwd())
    planned = make_plan(Path.cwd(), args.model_dirs, args.vcs_ref, adopt=args.adopt)
    outcomes, not_attempted = update_all(planned, conflict=args.conflict)
    return report(planned, outcomes, not_attempted)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``scaffold-update`` console script: :func:`run` under the shared exit-status handler."""
    return run_script("scaffold-update", lambda: run(argv))


if __name__ == "__main__":
    sys.exit(main())
