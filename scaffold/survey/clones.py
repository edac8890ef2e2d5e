"""The survey's clones of this repository: made, checked to import their own modelgraft, reset after each model.

A clone is, by default, this checkout's working tree (tracked files and new ones git does not ignore,
committed once in a fresh repository), so uncommitted work is surveyed; otherwise a plain ``git clone``.
Processes in a clone run with ``PYTHONPATH`` set by ``scaffold/import_root.py``, so they import the
clone's generator and models, which :func:`check_imports` verifies before the first model.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from modelgraft.scaffold import git as git_helper
from modelgraft.scaffold.import_root import import_root
from modelgraft.scaffold.survey.errors import SurveyError

#: Top-level folders never copied into a worktree clone, whatever git says (a virtualenv is heavy).
_HEAVY = frozenset({".venv", "venv", ".git", "node_modules", ".tox", ".nox"})


def git(repo: Path, *args: str) -> str:
    """The output of ``git <args>`` in ``repo``, committing as the survey; :class:`SurveyError` if it fails."""
    return git_helper.git_output(repo, *args, identity=True, error=SurveyError)


def repository_root(start: Path) -> Path:
    """The repository to survey: the git root holding ``start``, which must hold the template (copier.yml)."""
    found = git_helper.git(start, "rev-parse", "--show-toplevel")
    if found.returncode != 0:
        raise SurveyError(f"{start} is not inside a git repository: run scaffold-survey in the modelgraft repository")
    root = Path(found.stdout.strip()).resolve()
    if not (root / "copier.yml").is_file():
        raise SurveyError(f"{root} has no copier.yml: run scaffold-survey in the modelgraft repository")
    return root


def worktree_files(root: Path) -> list[str]:
    """The working tree as git sees it: tracked files that exist and new ones it does not ignore; none heavy."""
    listed = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    paths = []
    for path in sorted(set(listed.split("\0"))):
        if not path or path.split("/", 1)[0] in _HEAVY:
            continue
        full = root / path
        if full.is_file() or full.is_symlink():
            paths.append(path)
    return paths


def make_clone(root: Path, dest: Path, *, from_worktree: bool) -> Path:
    """A repository at ``dest`` holding ``root``'s working tree in one commit, or a plain ``git clone``."""
    if not from_worktree:
        git(root, "clone", "--quiet", str(root), str(dest))
        return dest
    dest.mkdir(parents=True)
    for path in worktree_files(root):
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / path, target, follow_symlinks=False)
    git(dest, "init", "--quiet")
    git(dest, "add", "--all")
    git(dest, "commit", "--quiet", "--no-verify", "-m", "scaffold-survey: the working tree of " + str(root))
    # Copier clones the template source for every model it copies, hardlinking its objects: one pack is two
    # links where the commit left a thousand loose objects.
    git(dest, "repack", "-a", "-d", "-q")
    return dest


def subprocess_env(clone: Path, threads: int | None = None) -> dict[str, str]:
    """This environment, importing modelgraft from the clone (scaffold/import_root.py), no pytest options leak in."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTEST_ADDOPTS", "PYTHONHOME"}}
    env.update(PYTHONPATH=str(import_root(clone)), NO_COLOR="1", TERM="dumb", PYTHONUNBUFFERED="1")
    if threads is not None:
        for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(variable, str(threads))
    return env


def check_imports(clone: Path) -> None:
    """The clone's processes must import the clone's generator and models, not the checkout the survey runs from."""
    probe = "import modelgraft.generator as g, modelgraft.models as m; print(g.__file__); print(m.__file__)"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=clone,
        env=subprocess_env(clone),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SurveyError(
            f"in the clone {clone}, `import modelgraft.generator, modelgraft.models` fails:\n{result.stderr.strip()}"
        )
    for line in result.stdout.split():
        if not Path(line).resolve().is_relative_to(clone.resolve()):
            raise SurveyError(f"in the clone {clone}, Python imports {line}: not the clone's (check PYTHONPATH)")


def changed_paths(clone: Path) -> list[str]:
    """What ``git status`` lists in the clone (changed, new or deleted), relative to its root."""
    status = git_helper.git(clone, "status", "--porcelain", "--untracked-files=all").stdout
    return [line[3:].strip().strip('"') for line in status.splitlines() if line.strip()]


def reset_clone(clone: Path, model: str) -> None:
    """Remove ``models/<m>`` (ignored files included) and undo anything else the copy changed."""
    git_helper.git(clone, "clean", "-fdxq", "--", f"models/{model}")
    if changed_paths(clone):
        git_helper.git(clone, "checkout", "--quiet", "--", ".")
        git_helper.git(clone, "clean", "-fdq")


class CloneFactory:
    """Worker i's clone, made on first use: ``<base>/worker-<i>/modelgraft``, its imports checked."""

    def __init__(self, root: Path, base: Path, *, from_worktree: bool) -> None:
        self.root, self.base, self.from_worktree = root, base, from_worktree
        self._made: dict[int, Path] = {}

    def __call__(self, index: int) -> Path:
        if index not in self._made:
            clone = make_clone(
                self.root, self.base / f"worker-{index}" / "modelgraft", from_worktree=self.from_worktree
            )
            check_imports(clone)
            self._made[index] = clone
        return self._made[index]
