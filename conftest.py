"""The model folders are installed as ``modelgraft.models.*``: pytest must not import them by folder name.

pytest collects a folder that holds an ``__init__.py`` as a package and imports that file (to look for
``setup_module``) under the folder's own name, here ``models`` and ``models.<m>``: a second copy of the
package, which would register every model a second time. Collected as plain folders, they are only walked;
the tests under them import what they test through ``modelgraft``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

INSTALLED_FOLDERS = tuple(Path(__file__).parent / name for name in ("generator", "models", "scaffold"))


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if any(path == folder or folder in path.parents for folder in INSTALLED_FOLDERS):
        return pytest.Dir.from_parent(parent, path=path)
    return None
