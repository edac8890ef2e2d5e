"""Unpack the upstream sources of any released version into a git-ignored workspace.

The wheel comes from the package registry through pip (the only network this
project uses); only its Python sources are kept, under
``<workspace>/hf_reference/v<version>/``, so several versions can sit side by
side and be diffed or surveyed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from modelgraft.generator.errors import PatchgenError

DEFAULT_WORKSPACE = ".patchgen_workspace"


def reference_root(workspace: Path, version: str) -> Path:
    """Folder that holds the top-level package of ``version`` once fetched."""
    return workspace / "hf_reference" / f"v{version}"


def download_wheel(distribution: str, version: str, dest: Path, pip_args: tuple[str, ...] = ()) -> Path:
    """``pip download`` one wheel, no dependencies; returns its path."""
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
        "-q", "-d", str(dest), *pip_args, f"{distribution}=={version}",
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel downloaded"]
        raise PatchgenError(
            f"pip could not download {distribution}=={version}: {detail[0]}", target=f"{distribution}=={version}"
        )
    return wheels[0]


def unpack_sources(wheel: Path, package: str, root: Path) -> int:
    """Extract ``package/**.py`` from ``wheel`` into ``root``; returns the number of files."""
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith(f"{package}/") and name.endswith(".py"):
                target = root / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
                count += 1
    if count == 0:
        raise PatchgenError(f"{wheel.name} holds no {package}/ sources", target=wheel.name)
    return count


def fetch_reference(
    version: str,
    *,
    workspace: Path,
    distribution: str = "transformers",
    package: str = "transformers",
    pip_args: tuple[str, ...] = (),
) -> Path:
    """Make ``<workspace>/hf_reference/v<version>/<package>`` exist; returns the version folder."""
    root = reference_root(workspace, version)
    if (root / package / "__init__.py").is_file():
        return root
    with tempfile.TemporaryDirectory(prefix="patchgen-wheel-") as tmp:
        wheel = download_wheel(distribution, version, Path(tmp), pip_args)
        staging = Path(tmp) / "unpacked"
        unpack_sources(wheel, package, staging)
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(root / package, ignore_errors=True)
        shutil.move(str(staging / package), str(root / package))
    return root
