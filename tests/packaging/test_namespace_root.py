"""``modelgraft`` is a regular package: no stray folder of that name on ``sys.path`` shadows it or merges into it.

Specification (docs/design.md, "Importing changes nothing"; src/modelgraft/__init__.py): with a folder named
``modelgraft`` first on ``sys.path`` (the working directory of a ``python -c``), empty or holding a stray
module and a ``models`` package of its own, ``import modelgraft.models`` imports the installed package, and
the stray module cannot be imported as ``modelgraft.stray``: in this checkout's editable install (which
puts ``src/`` on ``sys.path``) and in the wheel (installed with its base requirements, ``test_layers.py``).
A folder holding a ``modelgraft/__init__.py`` of its own still comes first, as ``scaffold/import_root.py``
needs for a clone's processes. Importing ``modelgraft`` adds that one module and changes nothing else.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from wheel_builds import REPO_ROOT, build_wheel, install_with_base_requirements, run, the_wheel

from modelgraft.scaffold.import_root import import_root

#: What the stray folder's own ``models`` package says when it is the one imported.
STRAY_OWNER = "the stray folder"

IMPORT = """
import json, sys
import modelgraft.models
import modelgraft
try:
    import modelgraft.stray
    stray = modelgraft.stray.__file__
except ImportError:
    stray = None
print(json.dumps({
    "root": modelgraft.__file__,
    "path": list(modelgraft.__path__),
    "models": modelgraft.models.__file__,
    "owner": getattr(modelgraft.models, "OWNER", None),
    "stray": stray,
    "first_on_path": sys.path[0],
}))
"""

#: Everything ``import modelgraft`` could change: sys.modules, sys.path, the finders and path hooks.
NOTHING_ELSE = """
import sys
before = set(sys.modules), list(sys.path), list(sys.meta_path), list(sys.path_hooks)
import modelgraft
after = set(sys.modules), list(sys.path), list(sys.meta_path), list(sys.path_hooks)
assert after[0] - before[0] == {"modelgraft"}, sorted(after[0] - before[0])
assert after[1:] == before[1:], after[1:]
print(modelgraft.__file__)
"""


@pytest.fixture(scope="module")
def wheel_python(built_once: Callable[[str, Callable[[Path], None]], Path]) -> Path:
    wheel = the_wheel(built_once("wheel", build_wheel))
    return built_once("base-venv", install_with_base_requirements(wheel)) / "bin" / "python"


def _installed(kind: str, wheel_python: Path) -> tuple[Path, Path, Path]:
    """The interpreter of ``kind``, and the files its ``modelgraft`` and ``modelgraft.models`` must come from."""
    if kind == "editable":
        return (
            Path(sys.executable),
            REPO_ROOT / "src" / "modelgraft" / "__init__.py",
            REPO_ROOT / "models" / "__init__.py",
        )
    site = Path(run([str(wheel_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
    return wheel_python, site / "modelgraft" / "__init__.py", site / "modelgraft" / "models" / "__init__.py"


def _stray_folder(parent: Path, content: str) -> Path:
    folder = parent / "modelgraft"
    folder.mkdir()
    if content == "a stray module and models package":
        (folder / "stray.py").write_text("STRAY = True\n", encoding="utf-8")
        (folder / "models").mkdir()
        (folder / "models" / "__init__.py").write_text(f"OWNER = {STRAY_OWNER!r}\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("content", ["nothing", "a stray module and models package"])
@pytest.mark.parametrize("kind", ["editable", "wheel"])
def test_a_stray_modelgraft_folder_first_on_sys_path_neither_shadows_nor_merges(
    kind: str, content: str, wheel_python: Path, tmp_path: Path
) -> None:
    python, root, models = _installed(kind, wheel_python)
    _stray_folder(tmp_path, content)

    found: dict[str, Any] = json.loads(run([str(python), "-c", IMPORT], cwd=tmp_path))

    assert found["first_on_path"] in ("", str(tmp_path))  # the working directory, holding the stray folder
    assert (found["root"], found["models"]) == (str(root), str(models))
    assert (found["owner"], found["stray"]) == (None, None)


def test_in_a_checkout_the_package_s_path_is_the_checkout_root(tmp_path: Path) -> None:
    found = json.loads(run([sys.executable, "-c", IMPORT], cwd=tmp_path))
    assert found["path"] == [str(REPO_ROOT)]


@pytest.mark.parametrize("kind", ["editable", "wheel"])
def test_importing_modelgraft_changes_nothing_but_adding_itself(kind: str, wheel_python: Path, tmp_path: Path) -> None:
    python, root, _ = _installed(kind, wheel_python)
    assert run([str(python), "-c", NOTHING_ELSE], cwd=tmp_path).strip() == str(root)


def test_a_folder_with_its_own_modelgraft_package_still_comes_first(tmp_path: Path) -> None:
    """What scaffold/import_root.py relies on: a clone's processes import the clone's folders."""
    clone = tmp_path / "clone"
    (clone / "models").mkdir(parents=True)
    (clone / "models" / "__init__.py").write_text("OWNER = 'the clone'\n", encoding="utf-8")
    env = {"PYTHONPATH": str(import_root(clone))}

    result = subprocess.run(
        [sys.executable, "-c", IMPORT], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )

    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert (found["models"], found["owner"]) == (str(clone / "models" / "__init__.py"), "the clone")
