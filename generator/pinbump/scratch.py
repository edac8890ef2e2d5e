"""The scratch copy and the throwaway environment a trial works in: the project and its environment stay as
they were.

The copy is the working tree as git sees it (tracked files and new ones it does not ignore, uncommitted
work included), in a fresh repository of one commit, so what the trial changed is ``git diff`` there. Its
pin is moved in ``pyproject.toml``, the one place the project names it. The environment is a new virtualenv
with the copy installed in editable mode, which pulls the new transformers and the project's other
requirements through pip (the package registry, as the README's set-up does); torch is the version the
project's environment has, so nothing large is downloaded.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from modelgraft.generator.errors import PatchgenError
from modelgraft.generator.installed import installed_version
from modelgraft.scaffold.survey.clones import make_clone
from modelgraft.scaffold.survey.errors import SurveyError

#: The requirement that pins transformers, as pyproject.toml spells it: the version is group 2.
_PIN = re.compile(r'("transformers==)([^"]+)(")')


def pinned_version(pyproject: Path) -> str:
    """The transformers version ``pyproject`` pins; an error naming the file if it pins none."""
    found = _PIN.search(pyproject.read_text(encoding="utf-8"))
    if found is None:
        raise PatchgenError(f'{pyproject} pins no transformers version ("transformers==X")', target="transformers")
    return found[2]


def move_pin(pyproject: Path, version: str) -> str:
    """Pin ``version`` in ``pyproject``; returns the version it pinned before."""
    old = pinned_version(pyproject)
    text = pyproject.read_text(encoding="utf-8")
    pyproject.write_text(_PIN.sub(lambda m: f"{m[1]}{version}{m[3]}", text, count=1), encoding="utf-8")
    return old


def scratch_copy(root: Path, dest: Path) -> Path:
    """``root``'s working tree, committed once in a fresh repository at ``dest``."""
    try:
        return make_clone(root, dest, from_worktree=True)
    except SurveyError as error:
        raise PatchgenError(f"cannot copy the project for the trial: {error}", target=str(root)) from error


def _tail(text: str, lines: int = 5) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def make_environment(checkout: Path, folder: Path, pip_args: tuple[str, ...] = ()) -> Path:
    """A new virtualenv at ``folder`` with ``checkout`` installed editable with its test extra; its python.

    Raises PatchgenError with pip's last lines when the environment cannot be made (a version whose
    requirements conflict, a registry that lacks it).
    """
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, capture_output=True)
    python = folder / "bin" / "python"
    torch = installed_version("torch")
    requirements = [f"torch=={torch}"] if torch else []
    command = [
        str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pip_args,
        *requirements, "-e", f"{checkout}[test]",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PatchgenError(
            f"pip could not make the trial environment: {_tail(result.stderr or result.stdout)}",
            target=f"transformers=={pinned_version(checkout / 'pyproject.toml')}",
        )
    return python
