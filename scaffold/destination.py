"""Where a new model package goes, and the name it is imported by: in modelgraft's own models/, or in any
training repository's package of models.

A copy's destination is a folder ``<models package>/<m>``. Its repository root is the nearest folder above it
whose ``pyproject.toml`` has a ``[tool.patchgen]`` table: there the generator finds its settings and
discovers configs, and there the copy's tasks run, so the new package is imported by its path from that root
(``models/olmo2`` -> ``models.olmo2``; ``mytrainer/models/olmo2`` -> ``mytrainer.models.olmo2``), each folder on
the way a package. modelgraft's own ``models/`` is the one exception: it installs as ``modelgraft.models``.

Nothing here imports the project's run time. The scaffold's Jinja extension asks it for Copier's defaults, and
``python -m modelgraft.scaffold.destination <folder> <model>`` is a copy's first task, which refuses a folder
where no package can be made (docs/scaffolding.md, "Scaffolding into your own repository").
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from modelgraft.generator.discovery import find_settings
from modelgraft.generator.errors import DiscoveryError

__all__ = ["Destination", "DestinationError", "destination"]


class DestinationError(ValueError):
    """A destination no package of models can be created in: the message says why and what to do."""


@dataclass(frozen=True)
class Destination:
    """A new model package's folder, its repository root and its import name."""

    folder: Path
    root: Path
    package: str

    @property
    def relative(self) -> str:
        """The folder relative to the repository root (``models/olmo2``)."""
        return self.folder.relative_to(self.root).as_posix()

    @property
    def root_from_folder(self) -> str:
        """The repository root as a path relative to the folder (``../..``): where the copy's tasks run."""
        return os.path.relpath(self.root, self.folder)


def _is_modelgraft_checkout(root: Path) -> bool:
    """modelgraft's own repository: its template and its run time's registry side by side."""
    return (root / "copier.yml").is_file() and (root / "models" / "registry.py").is_file()


def destination(folder: Path | str, model: str) -> Destination:
    """The destination of model package ``model`` at ``folder``; :class:`DestinationError` if none can be made."""
    folder = Path(folder).resolve()
    try:
        settings = find_settings(folder.parent)
    except DiscoveryError as error:
        raise DestinationError(
            f"{error}: add a [tool.patchgen] table to the repository's pyproject.toml, naming the folder that holds "
            'your model packages (roots = ["models"])'
        ) from error
    root, roots = settings.root, settings.roots
    if _is_modelgraft_checkout(root):
        if folder.parent != root / "models":
            raise DestinationError(f"in the modelgraft repository a model goes to models/{model}, not {folder}")
        return Destination(folder, root, f"modelgraft.models.{model}")
    if not any(folder.is_relative_to(r) for r in roots):
        listed = ", ".join(r.relative_to(root).as_posix() for r in roots)
        raise DestinationError(
            f"{folder} lies outside the discovery roots of {root / 'pyproject.toml'} ([tool.patchgen] roots: "
            f"{listed}): its config would never be generated"
        )
    parts = folder.relative_to(root).parts
    for depth in range(1, len(parts)):
        package_dir = root.joinpath(*parts[:depth])
        if not (package_dir / "__init__.py").is_file():
            raise DestinationError(
                f"{package_dir} has no __init__.py: the new model must be importable as {'.'.join(parts)} from "
                f"{root}, so every folder on the way must be a package"
            )
    return Destination(folder, root, ".".join(parts))


def main(argv: list[str] | None = None) -> int:
    """Copier's first task: exit 0 when a model package can be made at the folder, 1 with the reason."""
    folder, model = sys.argv[1:] if argv is None else argv
    try:
        found = destination(folder, model)
    except DestinationError as error:
        print(f"scaffold destination: {error}; Copier removes the new folder", file=sys.stderr)
        return 1
    print(f"scaffold destination: {found.relative} in {found.root}, imported as {found.package}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
