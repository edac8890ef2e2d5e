"""pyproject.toml declares exactly what the code imports, layer by layer: no dependency unused, none missing.

Imports are read with ``ast`` (module level and inside functions alike) from the shipped packages, those
setup.py installs under ``modelgraft``. The layers (README, "Installation layers"):

- the base install, ``[project] dependencies``: exactly what ``models/`` imports at run time (the package
  ``modelgraft`` itself included), its optional kernel families, its patch configs and its tests left out;
  and ``models/`` at run time imports nothing of ``modelgraft.generator`` or ``modelgraft.scaffold``;
- the ``tools`` extra: exactly what ``generator/``, ``scaffold/`` and the patch configs (which run at
  generation time) import beyond the base, and the modules the console scripts name when one is missing;
- the ``gpu`` extra: what the GPU kernel families import beyond the base;
- the ``test`` extra: the tools extra (``modelgraft[tools]``), and what only tests import (``tests/``, the
  parity harness ``models/testing/`` and each ``models/<m>/tests/``) beyond the base and the tools.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from modelgraft.generator.entrypoint import TOOLS_EXTRA, TOOLS_MODULES

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

#: Modules the test extra installs that no file of ours imports: upstream's code, which tests run, imports them
#: (the module, and where upstream needs it). A test that runs that code fails without them.
UPSTREAM_NEEDS = {"num2words": "transformers' SmolVLMProcessor, which a SmolVLM copy's scaffold tests build"}

#: Files of the shipped packages that belong to an extra rather than to the runtime.
GPU_FILES = ("models/ops/kernels/liger.py", "models/ops/kernels/fla_delta.py", "models/ops/kernels/causal_conv.py")

#: The distribution itself, as an extra names another of its extras (``modelgraft[tools]``).
PROJECT = PYPROJECT["project"]["name"]


def _is_test_file(rel: str) -> bool:
    return rel.startswith(("tests/", "models/testing/")) or re.match(r"models/[^/]+/tests/", rel) is not None


def _is_patch_config(rel: str) -> bool:
    """A model's patch config: it lives in models/ but runs at generation time, through the generator."""
    return re.fullmatch(r"models/[^/]+/[^/]+_patch_gen_config\.py", rel) is not None


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
    """``base``, ``tools``, ``gpu`` and ``test``: the Python files whose imports each layer must cover."""
    groups: dict[str, list[Path]] = {"base": [], "tools": [], "gpu": [], "test": []}
    shipped = [path for package in _shipped_packages() for path in (REPO_ROOT / package).rglob("*.py")]
    root_package = sorted((REPO_ROOT / "src" / "modelgraft").rglob("*.py"))
    for path in root_package + shipped + sorted((REPO_ROOT / "tests").rglob("*.py")):
        rel = path.relative_to(REPO_ROOT).as_posix()
        if rel in GPU_FILES:
            group = "gpu"
        elif _is_test_file(rel):
            group = "test"
        elif rel.startswith(("generator/", "scaffold/")) or _is_patch_config(rel):
            group = "tools"
        else:
            group = "base"
        groups[group].append(path)
    return groups


def _requirements(extra: str | None = None) -> list[str]:
    """The base requirements, or those of ``extra``, another extra it names (``modelgraft[tools]``) expanded."""
    texts = (
        PYPROJECT["project"]["dependencies"] if extra is None else PYPROJECT["project"]["optional-dependencies"][extra]
    )
    out = []
    for text in texts:
        requirement = Requirement(text)
        if requirement.name == PROJECT:
            out += [r for name in sorted(requirement.extras) for r in _requirements(name)]
        else:
            out.append(text)
    return out


def _imported_modules(path: Path) -> set[str]:
    """Every absolute import of ``path``, dotted in full (``from a.b import c`` gives ``a.b`` and ``a.b.c``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


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


def test_the_base_dependencies_are_exactly_what_the_models_import_at_run_time():
    base = _modules(_requirements())
    imported = _third_party(_files()["base"], _first_party())
    assert {"torch", "transformers"} <= set(imported), "the run-time files are the ones we think they are"
    problems = _mismatch("[project] dependencies", base, imported, set(PLATFORM_PROVIDED))
    assert not problems, "pyproject.toml and the imports disagree:\n  " + "\n  ".join(problems)


def test_the_models_import_nothing_of_the_generator_or_the_scaffolder_at_run_time():
    """What the base install runs never reaches code that needs the tools extra."""
    found = [
        f"{path.relative_to(REPO_ROOT).as_posix()}: {name}"
        for path in _files()["base"]
        for name in sorted(_imported_modules(path))
        if name.split(".")[:2] in (["modelgraft", "generator"], ["modelgraft", "scaffold"])
    ]
    assert found == []


def test_the_tools_extra_is_exactly_what_the_generator_and_the_scaffolder_import_beyond_the_base():
    base = _modules(_requirements())
    tools = _modules(_requirements("tools"))
    imported = {m: f for m, f in _third_party(_files()["tools"], _first_party()).items() if m not in base}
    # ruff is run as a binary, located through the package: generator/normalize/ruff.py imports
    # ruff.__main__.find_ruff_bin, so that use is an import too.
    assert "generator/normalize/ruff.py" in imported.get("ruff", []), "how generator/normalize/ruff.py finds ruff"
    problems = _mismatch("the tools extra", tools, imported, set())
    assert not problems, "pyproject.toml and the imports disagree:\n  " + "\n  ".join(problems)


def test_no_tool_is_in_the_base_dependencies():
    assert sorted(set(_modules(_requirements("tools"))) & set(_modules(_requirements()))) == []


def test_the_console_scripts_know_the_modules_of_the_tools_extra():
    """A console script that misses one of them names the extra (generator/entrypoint.py, TOOLS_MODULES)."""
    tools = _modules(_requirements("tools"))
    assert sorted(TOOLS_MODULES) == sorted(tools)
    assert TOOLS_EXTRA in PYPROJECT["project"]["optional-dependencies"]
    # The scripts ask for every module of the extra, so the extra installs each on every supported Python.
    assert not [text for text in tools.values() if Requirement(text).marker]


def test_the_gpu_extra_is_exactly_what_the_gpu_kernels_import():
    declared = _modules(_requirements("gpu"))
    base = _modules(_requirements())
    imported = {m: f for m, f in _third_party(_files()["gpu"], _first_party()).items() if m not in base}
    problems = _mismatch("the gpu extra", declared, imported, set())
    assert not problems, "pyproject.toml and the imports disagree:\n  " + "\n  ".join(problems)


def test_the_test_extra_holds_the_tools():
    """The suite tests the generator and the scaffolder: `pip install -e '.[test]'` must bring their tools."""
    extras = [Requirement(text) for text in PYPROJECT["project"]["optional-dependencies"]["test"]]
    assert [sorted(r.extras) for r in extras if r.name == PROJECT] == [["tools"]]


def test_the_test_extra_is_exactly_what_only_tests_import():
    tools = _modules(_requirements("tools"))
    declared = {m: text for m, text in _modules(_requirements("test")).items() if m not in tools}
    base = _modules(_requirements())
    imported = {
        m: f for m, f in _third_party(_files()["test"], _first_party()).items() if m not in base and m not in tools
    }
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    plugins = set()
    for dist, flag in PLUGINS.items():
        assert re.search(rf"\bpytest\b.* {re.escape(flag)}\b", ci), f"{dist} is declared for pytest {flag}"
        plugins.add(next(m for m, text in declared.items() if Requirement(text).name == dist))
    problems = _mismatch("the test extra", declared, imported, plugins | set(UPSTREAM_NEEDS))
    assert not problems, "pyproject.toml and the imports disagree:\n  " + "\n  ".join(problems)


def test_what_upstream_needs_for_the_tests_is_declared_in_the_test_extra():
    declared = _modules(_requirements("test"))
    assert set(UPSTREAM_NEEDS) <= set(declared)


def test_a_declared_but_unused_and_an_undeclared_dependency_are_both_reported():
    declared = _modules(["libcst>=1.1", "jinja2>=3.1"])
    problems = _mismatch("deps", declared, {"jinja2": ["a.py"], "numpy": ["b.py"]}, set())
    assert problems == [
        "numpy is imported (b.py) but not declared in deps",
        "'libcst>=1.1' is declared in deps but nothing there imports libcst",
    ]
