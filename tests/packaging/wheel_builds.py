"""What the packaging tests build, each once per run (the root conftest's ``built_once``): the wheel, and the
virtual environment it is installed into.

- :func:`build_wheel`: ``pip wheel`` of a copy of the checkout's files (tracked and untracked, not ignored),
  so the build leaves nothing in the working tree.
- :func:`install_with_outer_environment`: the wheel alone (``--no-deps --no-index``) in a fresh virtual
  environment that reaches this environment's packages through a ``.pth`` line naming its site-packages (a
  ``.pth`` line adds the folder to ``sys.path`` without running that folder's own ``.pth`` files, so the
  editable install of this checkout stays out of sight).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def run(command: list[str], **kwargs: Any) -> str:
    """``command``'s stdout; it must succeed. No PYTHONPATH or PYTHONHOME reaches it."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    result = subprocess.run(command, check=False, capture_output=True, text=True, env=env, **kwargs)
    assert result.returncode == 0, f"{command}: {result.stderr}"
    return result.stdout


def copy_checkout(target: Path) -> Path:
    """The checkout's files (tracked and untracked, not ignored) under ``target``: what a clone would build."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT)
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not part of it
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def build_wheel(root: Path) -> None:
    source = copy_checkout(root / "source")
    run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(root), str(source)]
    )


def the_wheel(folder: Path) -> Path:
    (found,) = folder.glob("modelgraft-*.whl")
    return found


def _venv(folder: Path) -> tuple[Path, Path]:
    """A fresh virtual environment at ``folder`` without pip; its python and its site-packages."""
    run([sys.executable, "-m", "venv", "--without-pip", str(folder)])
    python = folder / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
    return python, site


def _pip_install_alone(python: Path, wheel: Path) -> None:
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)])


def install_with_outer_environment(wheel: Path) -> Callable[[Path], None]:
    """A fresh venv with ``wheel`` installed; torch and transformers come from this environment by a .pth line."""

    def build(venv: Path) -> None:
        python, site = _venv(venv)
        _pip_install_alone(python, wheel)
        # Written after the install, so pip saw an empty environment and never this checkout's editable install.
        (site / "outer_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")

    return build
