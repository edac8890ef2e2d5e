"""What the packaging tests build, each once per run (the root conftest's ``built_once``): the wheel, and the
virtual environments it is installed into.

- :func:`build_wheel`: ``pip wheel`` of a copy of the checkout's files (tracked and untracked, not ignored),
  so the build leaves nothing in the working tree.
- :func:`install_with_outer_environment`: the wheel alone (``--no-deps --no-index``) in a fresh virtual
  environment that reaches this environment's packages through a ``.pth`` line naming its site-packages (a
  ``.pth`` line adds the folder to ``sys.path`` without running that folder's own ``.pth`` files, so the
  editable install of this checkout stays out of sight).
- :func:`install_with_base_requirements`: the wheel and only what its base requirements need, recursively:
  a base install, as ``pip install modelgraft`` makes it, without the tools extra. The distributions are the
  ones this environment has installed, linked file by file from its site-packages (no download, no copy:
  torch alone is 900 MiB); which of them, and at which versions, the wheel's metadata decides. Their folders'
  ``__pycache__`` folders are linked too: the bytecode an installed environment would hold.
"""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

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


def requires_dist(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` lines, from its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        return email.message_from_bytes(archive.read(name)).get_all("Requires-Dist") or []


def base_requirements(wheel: Path) -> list[Requirement]:
    """The requirements a plain ``pip install`` of the wheel installs: those of no extra, for this Python."""
    return [r for r in map(Requirement, requires_dist(wheel)) if r.marker is None or r.marker.evaluate({"extra": ""})]


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


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(requirements: list[Requirement]) -> dict[str, metadata.Distribution]:
    """Normalized name -> the installed distribution, for ``requirements`` and what they require, recursively.

    Markers are evaluated for this Python, with the extras each requirement asks for. Every distribution
    needed must be installed here at a version the requirement admits: the set is what pip would install.
    """
    found: dict[str, metadata.Distribution] = {}
    expanded: set[tuple[str, str]] = set()  # (distribution, extra) whose requirements are pending or done
    pending = [(requirement, "") for requirement in requirements]
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = _normalized(requirement.name)
        try:
            distribution = found.get(name) or metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            raise AssertionError(f"{requirement} is needed by the base install but not installed here") from None
        assert requirement.specifier.contains(distribution.version, prereleases=True), (
            f"{requirement}: {distribution.version} is installed here"
        )
        found[name] = distribution
        for wanted in ("", *sorted(requirement.extras)):
            if (name, wanted) not in expanded:
                expanded.add((name, wanted))
                pending.extend((own, wanted) for own in map(Requirement, distribution.requires or []))
    return found


def install_with_base_requirements(wheel: Path) -> Callable[[Path], None]:
    """A fresh venv with ``wheel`` and the installed copies of exactly the distributions its base install needs.

    Each distribution's files (its RECORD) are linked into the new site-packages, folders made as folders, so
    the environment holds those distributions and no other: nothing of the tools extra, and no editable install.
    """

    def build(venv: Path) -> None:
        python, site = _venv(venv)
        _pip_install_alone(python, wheel)
        folders: dict[Path, Path] = {}  # a folder made here -> the folder its files are linked from
        for distribution in closure(base_requirements(wheel)).values():
            root = Path(distribution.locate_file("")).resolve()
            for file in distribution.files or []:
                target = site / file
                if ".." in file.parts or target.exists():  # scripts in bin/, files two distributions share
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(root / file)
                folders.setdefault(target.parent, (root / file).parent)
        # The bytecode this environment has compiled for those files, as an installed environment has its own: a
        # module's cached bytecode is looked up next to the path it is imported from, and without these links the
        # new environment would compile torch's modules from source again at every start.
        for folder, linked_from in folders.items():
            if (linked_from / "__pycache__").is_dir() and not (folder / "__pycache__").exists():
                (folder / "__pycache__").symlink_to(linked_from / "__pycache__")

    return build
