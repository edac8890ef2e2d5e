"""pyproject.toml declares exactly what the code imports: no dependency unused, none missing.

Imports are read with ``ast`` (module level and inside functions alike) from the shipped packages, those
setup.py installs under ``modelgraft``. The runtime code must import every ``[project]`` dependency
and nothing else from outside the standard library; what only tests import (``tests/``, the parity
harness ``models/testing/`` and each ``models/<m>/tests/``) belongs to the ``test`` extra; the Liger
kernels to the ``gpu`` extra.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))

#: Distribution name (normalized) -> the top-level module it provides, where the two differ.
IMPORT_NAMES = {
    "pyyaml": "yaml",
    "huggingface-hub": "huggingface_hub",
    "liger-kernel": "liger_kernel",
    "pillow": "PIL",
    "flash-linear-attention": "fla",
}

#: Modules that no extra can install, with the reason they are imported anyway.
PLATFORM_PROVIDED = {
    # Ascend's torch_npu comes with the CANN toolkit; models.ops.kernels imports npu.py only after
    # checking that torch_npu is importable.
    "torch_npu": "models/ops/kernels/npu.py",
}

#: Test-extra distributions used without an import: pytest plugins the test command enables.
PLUGINS = {"pytest-xdist": "-n"}

#: Files of the shipped packages that belong to an extra rather than to the runtime.
GPU_FILES = ("models/ops/kernels/liger.py", "models/ops/kernels/fla_delta.py", "models/ops/kernels/causal_conv.py")


def _is_test_file(rel: str) -> bool:
    return rel.startswith(("tests/", "models/testing/")) or re.match(r"models/[^/]+/tests/", rel) is not None


def _shipped_packages() -> list[str]:
    """The root folders setup.py installs under the ``modelgraft`` namespace (read, not run)."""
    tree = ast.parse((REPO_ROOT / "setup.py").read_text(encoding="utf-8"))
    folders = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ROOT_FOLDERS" for t in node.targets)
    )
    return sorted(ast.literal_eval(folders))


def _top_level_imports(path: Path) -> set[str]:
    """Every absolute import of ``path``, by its top-level name, wherever in the file it is."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _third_party(files: list[Path], first_party: set[str]) -> dict[str, list[str]]:
    """Top-level module -> the files (relative) that import it, standard library and first party left out."""
    found: dict[str, list[str]] = {}
    for path in files:
        for name in _top_level_imports(path):
            if name in sys.stdlib_module_names or name in first_party or name == "__future__":
                continue
            found.setdefault(name, []).append(path.relative_to(REPO_ROOT).as_posix())
    return found


def _modules(requirements: list[str]) -> dict[str, str]:
    """Top-level module -> the requirement that provides it."""
    out = {}
    for text in requirements:
        name = re.sub(r"[-_.]+", "-", Requirement(text).name).lower()
        out[IMPORT_NAMES.get(name, name.replace("-", "_"))] = text
    return out


def _files() -> dict[str, list[Path]]:
    """``runtime``, ``gpu`` and ``test``: the Python files whose imports each requirement list must cover."""
    groups: dict[str, list[Path]] = {"runtime": [], "gpu": [], "test": []}
    shipped = [path for package in _shipped_packages() for path in (REPO_ROOT / package).rglob("*.py")]
    for path in shipped + sorted((REPO_ROOT / "tests").rglob("*.py")):
        rel = path.relative_to(REPO_ROOT).as_posix()
        group = "gpu" if rel in GPU_FILES else "test" if _is_test_file(rel) else "runtime"
        groups[group].append(path)
    return groups


def _first_party() -> set[str]:
    """The installed namespace and the helper modules tests import by their bare name (``projects``, ...)."""
    local = {path.stem for path in (REPO_ROOT / "tests").rglob("*.py")}
    # Test packages only: a folder without __init__.py (tests/packaging) is no module, and its name may be a
    # library's. The repository's benchmarks/ is imported by tests/benchmarks as a namespace package.
    local |= {path.name for path in (REPO_ROOT / "tests").rglob("*") if (path / "__init__.py").is_file()}
    return {"modelgraft", "benchmarks"} | local | {"tests"}


def _mismatch(label: str, declared: dict[str, str], imported: dict[str, list[str]], allowed: set[str]) -> list[str]:
    problems = []
    for module in sorted(set(imported) - set(declared) - allowed):
        where = ", ".join(sorted(imported[module])[:3])
        problems.append(f"{module} is imported ({where}) but not declared in {label}")
    for module in sorted(set(declared) - set(imported) - allowed):
        problems.append(f"{declared[module]!r} is declared in {label} but nothing there imports {module}")
    return problems


def test_the_shipped_packages_are_the_ones_scanned():
    assert _shipped_packages() == ["generator", "models", "scaffold"]


def test_project_dependencies_are_exactly_the_runtime_imports():
    runtime = _modules(PYPROJECT["project"]["dependencies"])
    imported = _third_party(_files()["runtime"], _first_party())
    # ruff is run as a binary, located through the package: generator/normalize/ruff.py imports
    # ruff.__main__.find_ruff_bin, so that use is an import too.
    assert "generator/normalize/ruff.py" in imported.get("ruff", []), "how generator/normalize/ruff.py finds ruff"
    problems = _mismatch("[project] dependencies", runtime, imported, set(PLATFORM_PROVIDED))
    assert not problems, "pyproject.toml and the imports disagree:\n  " + "\n  ".join(problems)


def test_the_gpu_extra_is_exactly_what_the_gpu_kernels_import():
    declared = _modules(PYPROJECT["project"]["optional-dependencies"]["gpu"])
    runtime = _modules(PYPROJECT["project"]["dependencies"])
    imported = {m: f for m, f in _third_party(_files()["gpu"], _first_party()).items() if m not in runtime}
    problems = _mismatch("the gpu extra", declared, imported, set())
    assert not problems, "pyproject.toml and the imports disagree:\n  " + "\n  ".join(problems)


def test_the_test_extra_is_exactly_what_only_tests_import():
    declared = _modules(PYPROJECT["project"]["optional-dependencies"]["test"])
    runtime = _modules(PYPROJECT["project"]["dependencies"])
    imported = {m: f for m, f in _third_party(_files()["test"], _first_party()).items() if m not in runtime}
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    plugins = set()
    for dist, flag in PLUGINS.items():
        assert re.search(rf"\bpytest\b.* {re.escape(flag)}\b", ci), f"{dist} is declared for pytest {flag}"
        plugins.add(next(m for m, text in declared.items() if Requirement(text).name == dist))
    problems = _mismatch("the test extra", declared, imported, plugins)
    assert not problems, "pyproject.toml and the imports disagree:\n  " + "\n  ".join(problems)


def test_a_declared_but_unused_and_an_undeclared_dependency_are_both_reported():
    declared = _modules(["libcst>=1.1", "jinja2>=3.1"])
    problems = _mismatch("deps", declared, {"jinja2": ["a.py"], "numpy": ["b.py"]}, set())
    assert problems == [
        "numpy is imported (b.py) but not declared in deps",
        "'libcst>=1.1' is declared in deps but nothing there imports libcst",
    ]
