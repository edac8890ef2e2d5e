"""Every runnable example of docs/dsl.md and docs/snippets.md generates against the pinned transformers.

Success examples must generate (exit 0), mark every patch with its banner, leave
a clean drift check and compile; error examples must exit 2 with the message the
doc shows and write nothing. See tests/docs/docs_markdown.py for the convention.
"""

from __future__ import annotations

import inspect
import re
import shutil
import sys
from pathlib import Path

import pytest
from docs_markdown import Example, examples, groups, message_pattern

import modelgraft.generator.snippets
from modelgraft.generator.cli import EXIT_ERROR, EXIT_OK, main
from modelgraft.generator.discovery import CONFIG_MODULE_PREFIX
from modelgraft.generator.dsl.config import PatchConfig

EXAMPLE_DOCS = ("dsl.md", "snippets.md")
PROJECT_PACKAGE = "zoo"

CASES = [(doc, name, members) for doc in EXAMPLE_DOCS for name, members in groups(doc).items()]


def _purge_project_modules() -> None:
    loaded_configs = CONFIG_MODULE_PREFIX.rstrip(".")
    for name in [m for m in sys.modules if m.split(".")[0] in (PROJECT_PACKAGE, loaded_configs)]:
        del sys.modules[name]


def _write_project(root: Path, members: list[Example]) -> Path | None:
    """Lay out the group's files under ``root``; returns the snippet folder if the group brings snippets."""
    (root / "pyproject.toml").write_text(f'[tool.patchgen]\nroots = ["{PROJECT_PACKAGE}"]\n', encoding="utf-8")
    files: dict[str, list[str]] = {}
    for example in members:
        files.setdefault(example.path, []).append(example.code)
    folders = sorted({p.split("/")[1] for p in files if p.startswith("models/")})
    snippet_dir = None
    for path, parts in files.items():
        text = "\n\n".join(parts)
        if path.startswith("models/") and path.endswith(".py"):
            for folder in folders:
                text = re.sub(rf"(?<![\w.])models\.{re.escape(folder)}\.", f"{PROJECT_PACKAGE}.{folder}.", text)
            dest = root / PROJECT_PACKAGE / path[len("models/") :]
            for package in (dest.parent, dest.parent.parent):
                (package / "__init__.py").parent.mkdir(parents=True, exist_ok=True)
                (package / "__init__.py").touch()
        elif path.startswith("generator/snippets/") and path.endswith(".py.j2"):
            if snippet_dir is None:
                snippet_dir = root / "snippets"
                shutil.copytree(
                    modelgraft.generator.snippets.SNIPPET_DIR,
                    snippet_dir,
                    ignore=shutil.ignore_patterns("*.py", "__pycache__"),
                )
            dest = snippet_dir / Path(path).name
        else:
            raise AssertionError(f"{members[0].where}: example path {path!r} is neither a config nor a snippet")
        dest.write_text(text, encoding="utf-8")
    return snippet_dir


def _banner_targets(generated: str) -> list[str]:
    """Targets listed under '# Patches:' in a generated header."""
    header = generated.split("# Patches:\n", 1)[1].split("# " + "=" * 100, 1)[0] if "# Patches:\n" in generated else ""
    return [
        re.match(r"#   - \w+ (\S+?):?(?: |$)", line).group(1)
        for line in header.splitlines()
        if line.startswith("#   - ")
    ]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run the CLI in ``tmp_path`` as if it were a project root; undo every global it touches."""
    monkeypatch.chdir(tmp_path)
    _purge_project_modules()
    yield tmp_path
    _purge_project_modules()


@pytest.mark.parametrize(("doc", "group", "members"), CASES, ids=[f"{d}:{g}" for d, g, _ in CASES])
def test_example_group(doc: str, group: str, members: list[Example], project: Path, monkeypatch, capsys) -> None:
    snippet_dir = _write_project(project, members)
    if snippet_dir is not None:
        monkeypatch.setattr(modelgraft.generator.snippets, "SNIPPET_DIR", snippet_dir)
    errors = [m for m in members if m.expected_error is not None]
    assert len(errors) <= 1, f"group {group!r} of docs/{doc} has more than one example-error"
    where = errors[0].where if errors else members[0].where

    code = main(["--all", "--diff", "-j", "1"])
    out, err = capsys.readouterr()

    if errors:
        actual = (
            err.strip()
            .replace(f"config {PROJECT_PACKAGE}.", "config models.")
            .replace(f"{PROJECT_PACKAGE}/", "models/")
        )
        assert code == EXIT_ERROR, f"{where}: expected exit {EXIT_ERROR}, got {code}\n{out}{err}"
        assert message_pattern(errors[0].expected_error).fullmatch(actual), (
            f"{where}: the message the doc shows is not what patchgen says\n"
            f"doc:    {errors[0].expected_error}\nactual: {actual}"
        )
        assert not list(project.rglob("generated")), f"{where}: a failing run wrote files"
        return

    assert code == EXIT_OK, f"{where}: generation failed\n{out}{err}"
    configs = [m.path for m in members if m.path.endswith("_patch_gen_config.py")]
    outputs = sorted((project / PROJECT_PACKAGE).glob("*/generated/*.py"))
    assert len(outputs) == len(set(configs)), f"{where}: expected one generated file per config, got {outputs}"
    for path in outputs:
        text = path.read_text(encoding="utf-8")
        compile(text, str(path), "exec")
        assert text.startswith("# " + "=" * 100 + "\n# GENERATED FILE - DO NOT EDIT BY HAND."), (
            f"{path.name}: no header"
        )
        for target in _banner_targets(text):
            assert re.search(rf"^ *# \[[A-Z ]+\] {re.escape(target)}\b", text, re.MULTILINE), (
                f"{where}: no banner for {target} in {path.name}"
            )
        assert path.with_suffix(".diff").read_text(encoding="utf-8").startswith("--- a/transformers/"), (
            f"{path.name}: no diff"
        )
    assert main(["--check", "-j", "1"]) == EXIT_OK, f"{where}: fresh output drifts\n{capsys.readouterr().out}"


def test_docs_have_examples() -> None:
    """The convention is in use: removing the markers must not make this suite vacuous."""
    dsl = examples("dsl.md")
    snippets = examples("snippets.md")
    assert sum(e.expected_error is None for e in dsl) >= 10
    assert sum(e.expected_error is not None for e in dsl) >= 7, "every check of docs/dsl.md needs an error example"
    assert any(e.path.startswith("generator/snippets/") for e in snippets), "snippets.md must write a snippet"
    assert any(e.expected_error is not None for e in snippets), "snippets.md must show a snippet error"


def test_dsl_examples_use_every_primitive() -> None:
    code = "\n".join(e.code for e in examples("dsl.md") if e.expected_error is None)
    primitives = [name for name, _ in inspect.getmembers(PatchConfig, inspect.isfunction) if not name.startswith("_")]
    assert "override_method" in primitives
    missing = [name for name in primitives if f".{name}(" not in code]
    for needle in (
        "create_patch_from_external(",
        "name_map=",
        "alias=",
        "is_from_import=False",
        "add=True",
        "keep_decorators=",
    ):
        if needle not in code:
            missing.append(needle)
    assert not missing, f"docs/dsl.md has no runnable example of: {', '.join(missing)}"


def test_error_pattern_is_strict() -> None:
    """``...`` is the only wildcard: a changed message must not match."""
    pattern = message_pattern("patchgen: error: config m, target X.f: upstream class X has no method ...")
    assert pattern.fullmatch("patchgen: error: config m, target X.f: upstream class X has no method 'f'")
    assert not pattern.fullmatch("patchgen: error: config m, target X.f: upstream class Y has no method 'f'")
