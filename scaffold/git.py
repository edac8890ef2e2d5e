"""The one way the scaffold tools run git: captured text output, and failures that name the command.

``scaffold-update``, ``scaffold-conflicts`` and ``scaffold-survey`` all read repositories through
:func:`git`; :func:`git_output` raises the caller's own error type (a :class:`ScaffoldError` exits 2,
the survey's ``SurveyError`` too), so each tool keeps its exit status and every message has one shape:
``git <args> failed in <repo>: <what git said>``. This module imports nothing of the project, so the
survey (which stays light) can use it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

#: Who commits in the repositories a tool makes (the survey's clones), whatever the machine's git says.
IDENTITY = (
    "-c", "user.name=modelgraft scaffold", "-c", "user.email=scaffold@example.invalid",
    "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", "-c", "init.defaultBranch=main",
)  # fmt: skip


class GitFailed(Exception):
    """A git command failed (the default error of :func:`git_output`)."""


def git(repo: Path, *args: str, identity: bool = False) -> subprocess.CompletedProcess[str]:
    """``git <args>`` in ``repo``; the caller checks the return code. ``identity``: commit as :data:`IDENTITY`."""
    config = IDENTITY if identity else ()
    return subprocess.run(["git", *config, *args], cwd=repo, check=False, capture_output=True, text=True)


def git_output(repo: Path, *args: str, identity: bool = False, error: type[Exception] = GitFailed) -> str:
    """The standard output of ``git <args>`` in ``repo``; ``error`` (naming the command and repo) if it fails."""
    result = git(repo, *args, identity=identity)
    if result.returncode != 0:
        said = result.stderr.strip() or result.stdout.strip()
        raise error(f"git {' '.join(args)} failed in {repo}: {said}")
    return result.stdout


def toplevel(start: Path, *, error: type[Exception] = GitFailed) -> Path:
    """The root of the git repository holding ``start``; ``error`` when ``start`` is in none."""
    return Path(git_output(start, "rev-parse", "--show-toplevel", error=error).strip()).resolve()
