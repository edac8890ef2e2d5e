"""A generated module refuses to import under another upstream version than the one it was generated from.

Specification (docs/design.md, "Generated from one upstream version"): every generated module calls
``modelgraft.models.upstream_version.require_generated_from`` right after its imports, with the version its header
names; under another installed version the import fails with ``UpstreamVersionError``, an ``ImportError`` naming
the module, both versions and the ways out. The import cases run in a fresh interpreter, so nothing this test
process imported can hide a change.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from modelgraft import models
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.preloaded_python import run_code
from modelgraft.models.upstream_version import UpstreamVersionError, require_generated_from

REPO_ROOT = Path(models.__file__).resolve().parent.parent

#: Every generated module, by dotted path.
GENERATED_MODULES = sorted(MODELING_REGISTRY.module_paths())

CHECK_MODULE = "modelgraft.models.upstream_version"

#: What a test sets ``transformers.__version__`` to: no release has it.
OTHER_VERSION = "0.0.1"

# transformers.processing_utils re-runs transformers/__init__.py and puts the new module object in sys.modules
# (direct_transformers_import): importing it first makes the `transformers` a test patches the one that stays.
PATCH_VERSION = (
    f"import transformers.processing_utils\nimport transformers\ntransformers.__version__ = {OTHER_VERSION!r}\n"
)


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    return Path(spec.origin).read_text(encoding="utf-8")


def _header_version(text: str) -> str:
    found = re.search(r"^# Source: \S+ \(transformers==(\S+)\)$", text, re.MULTILINE)
    assert found, "no source line in the header"
    return found.group(1)


def _fake_package(monkeypatch: pytest.MonkeyPatch, version: str | None) -> str:
    """An imported package ``fakeupstream`` whose ``__version__`` is ``version`` (none when None)."""
    package = types.ModuleType("fakeupstream")
    if version is not None:
        package.__version__ = version
    monkeypatch.setitem(sys.modules, "fakeupstream", package)
    return "fakeupstream"


# -- the check ------------------------------------------------------------------------------------------------


def test_the_check_passes_when_the_installed_version_is_the_one_generated_from(monkeypatch):
    require_generated_from(_fake_package(monkeypatch, "5.16.1"), "5.16.1", "gen.module")


def test_the_check_refuses_another_installed_version_with_an_import_error(monkeypatch):
    package = _fake_package(monkeypatch, "5.25.0")

    with pytest.raises(ImportError) as raised:
        require_generated_from(package, "5.16.1", "gen.module")

    assert isinstance(raised.value, UpstreamVersionError)
    assert (raised.value.name, raised.value.generated_from, raised.value.installed) == (
        "gen.module",
        "5.16.1",
        "5.25.0",
    )


def test_the_refusal_names_the_module_both_versions_and_the_ways_out(monkeypatch):
    package = _fake_package(monkeypatch, "5.25.0")

    with pytest.raises(UpstreamVersionError) as raised:
        require_generated_from(package, "5.16.1", "gen.module")

    message = str(raised.value)
    assert message.startswith(
        "gen.module was generated from fakeupstream==5.16.1, but fakeupstream 5.25.0 is installed"
    )
    assert "Install fakeupstream==5.16.1" in message
    assert "`generate-all`" in message
    assert 'docs/design.md, "Generated from one upstream version"' in message


def test_the_check_compares_versions_exactly(monkeypatch):
    with pytest.raises(UpstreamVersionError):
        require_generated_from(_fake_package(monkeypatch, "5.16.1.dev0"), "5.16.1", "gen.module")


def test_a_package_without_a_version_attribute_is_judged_by_its_distribution(monkeypatch):
    from importlib import metadata

    monkeypatch.setitem(sys.modules, "ruff", types.ModuleType("ruff"))

    require_generated_from("ruff", metadata.version("ruff"), "gen.module")
    with pytest.raises(UpstreamVersionError, match=f"but ruff {re.escape(metadata.version('ruff'))} is installed"):
        require_generated_from("ruff", "0.0.0", "gen.module")


def test_importing_the_check_imports_neither_torch_nor_transformers() -> None:
    code = (
        f"import sys, {CHECK_MODULE}\n"
        "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )

    result = subprocess.run([sys.executable, "-c", code], check=False, cwd=REPO_ROOT, capture_output=True, text=True)

    assert result.returncode == 0, result.stderr


# -- the zoo's generated modules ----------------------------------------------------------------------------------


@pytest.mark.parametrize("module", GENERATED_MODULES)
def test_every_generated_module_calls_the_check_after_its_imports_with_the_version_its_header_names(module: str):
    text = _source(module)
    tree = ast.parse(text)
    calls = [
        (i, node.value)
        for i, node in enumerate(tree.body)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) == "require_generated_from"
    ]
    imports = [
        i
        for i, node in enumerate(tree.body)
        if isinstance(node, ast.ImportFrom)
        and node.module == CHECK_MODULE
        and [a.name for a in node.names] == ["require_generated_from"]
    ]

    assert len(calls) == 1 and len(imports) == 1
    (position, call), first_definition = (
        calls[0],
        next(i for i, node in enumerate(tree.body) if isinstance(node, (ast.ClassDef, ast.FunctionDef))),
    )
    assert imports[0] < position < first_definition
    assert ast.unparse(call) == f"require_generated_from('transformers', {_header_version(text)!r}, __name__)"


def test_a_generated_module_imports_under_the_transformers_version_it_was_generated_from() -> None:
    module = MODELING_REGISTRY.module_path("llama")

    result = run_code(f"import {module}\n", cwd=REPO_ROOT)

    assert result.returncode == 0, result.stderr


def test_a_generated_module_refuses_to_import_under_another_transformers_version() -> None:
    module = MODELING_REGISTRY.module_path("llama")
    generated_from = _header_version(_source(module))

    result = run_code(f"{PATCH_VERSION}import {module}\n", cwd=REPO_ROOT)

    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"modelgraft.models.upstream_version.UpstreamVersionError: {module} was generated from "
        f"transformers=={generated_from}, but transformers {OTHER_VERSION} is installed"
    ), result.stderr


def test_every_generated_module_refuses_to_import_under_another_transformers_version() -> None:
    """One interpreter for the whole zoo: a refused import stops at the check, before the module's classes."""
    result = run_code(
        PATCH_VERSION
        + "import importlib\n"
        + "from modelgraft.models.upstream_version import UpstreamVersionError\n"
        + "imported = []\n"
        + f"for name in {GENERATED_MODULES!r}:\n"
        + "    try:\n"
        + "        importlib.import_module(name)\n"
        + "    except UpstreamVersionError as exc:\n"
        + "        assert exc.name == name and exc.installed == "
        + repr(OTHER_VERSION)
        + ", exc\n"
        + "    else:\n"
        + "        imported.append(name)\n"
        + "assert not imported, imported\n",
        cwd=REPO_ROOT,
    )

    assert result.returncode == 0, result.stderr
