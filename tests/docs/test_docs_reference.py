"""The reference docs say what the code does: every CLI option, every setting, every error type, the set-up commands."""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import shlex
import tomllib

import pytest
from docs_markdown import DOCS, REPO_ROOT
from packaging.requirements import Requirement
from packaging.version import Version

import modelgraft.generator.errors
from modelgraft.generator import cli, entrypoint

CLI_MD = (DOCS / "cli.md").read_text(encoding="utf-8")
README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _mentioned(text: str, option: str) -> bool:
    """``option`` written as code (inside backticks, possibly with its argument)."""
    return re.search(rf"`[^`\n]*(?<![\w-]){re.escape(option)}(?![\w-])[^`\n]*`", text) is not None


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string and positional metavar of ``parser`` and of its subcommands (by name)."""
    options = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                options.append(name)
                options.extend(o for o in _options(sub) if o not in options)
        else:
            options.extend(action.option_strings or [action.metavar or action.dest])
    return options


def _parser_options() -> list[str]:
    return _options(cli.build_parser())


def _script_parsers() -> dict[str, argparse.ArgumentParser]:
    """Console script -> its argparse parser (``build_parser`` of the module its work is in: entrypoint.SCRIPTS)."""
    parsers = {}
    for name in PYPROJECT["project"]["scripts"]:
        module = importlib.import_module(entrypoint.SCRIPTS[name].split(":", 1)[0])
        parsers[name] = module.build_parser()
    return parsers


@pytest.mark.parametrize("document", ["docs/cli.md", "README.md"])
def test_every_cli_option_is_documented(document: str) -> None:
    text = CLI_MD if document == "docs/cli.md" else README
    options = _parser_options()
    assert "--check" in options and "config.module" in options  # the parser is what we think it is
    missing = [option for option in options if not _mentioned(text, option)]
    assert not missing, f"{document} does not document: {', '.join(missing)}"


def test_every_console_script_and_its_options_are_in_the_cli_reference() -> None:
    parsers = _script_parsers()
    assert {"patchgen", "generate-all"} <= set(parsers)
    for script, parser in parsers.items():
        assert f"`{script}" in CLI_MD and f"`{script}" in README, f"{script} is not documented"
        missing = [option for option in _options(parser) if not _mentioned(CLI_MD, option)]
        assert not missing, f"docs/cli.md does not document {script} option(s): {', '.join(missing)}"


def test_documented_options_exist() -> None:
    """The reverse: no option in the patchgen tables of the CLI reference that the parser lacks."""
    known = set(_parser_options())
    section = CLI_MD.split("## `patchgen-pin`", 1)[0]
    documented = set(re.findall(r"^\| `(-[-\w]+)", section, re.MULTILINE)) | set(
        re.findall(r"^\| `-\w[^`]*`, `(--[-\w]+)", section, re.MULTILINE)
    )
    assert "--check" in documented, "the option table of docs/cli.md was not found"
    assert not documented - known, (
        f"docs/cli.md documents options patchgen does not have: {sorted(documented - known)}"
    )


def test_exit_codes_are_documented() -> None:
    assert (cli.EXIT_OK, cli.EXIT_DRIFT, cli.EXIT_ERROR, cli.EXIT_INTERNAL) == (0, 1, 2, 3)
    table = dict(re.findall(r"^\| `(\d)` \| (\w+)", CLI_MD, re.MULTILINE))
    assert table == {"0": "success", "1": "drift", "2": "bad", "3": "internal"}, table
    assert "`0` ok, `1` drift" in README and "`2` bad input" in README and "`3` a bug" in README


def test_every_pyproject_setting_is_documented() -> None:
    """Keys that discovery reads from [tool.patchgen] (``section.get("key", ...)``) appear in the settings table."""
    tree = ast.parse((REPO_ROOT / "generator" / "discovery.py").read_text(encoding="utf-8"))
    keys = {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "section"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    assert {"roots", "cache_dir"} <= keys
    table = set(re.findall(r"^\| `(\w+)` \|", CLI_MD.split("## Discovery", 1)[1], re.MULTILINE))
    assert keys <= table, f"docs/cli.md lacks [tool.patchgen] key(s): {sorted(keys - table)}"


def test_every_error_type_is_documented() -> None:
    types = [
        name
        for name, value in vars(modelgraft.generator.errors).items()
        if isinstance(value, type)
        and issubclass(value, modelgraft.generator.errors.PatchgenError)
        and value is not modelgraft.generator.errors.PatchgenError
    ]
    assert len(types) >= 10
    missing = [name for name in types if f"`{name}`" not in CLI_MD]
    assert not missing, f"docs/cli.md does not list error type(s): {', '.join(missing)}"


def _ci_command() -> str:
    lines = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    commands = [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]
    assert len(commands) == 1, f".ci/run should run one command, found {commands}"
    return commands[0]


def _readme_commands() -> list[str]:
    blocks = re.findall(r"^```bash\n(.*?)^```", README, re.DOTALL | re.MULTILINE)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_test_command_is_what_ci_runs() -> None:
    assert _ci_command() in _readme_commands(), "README's test command differs from .ci/run"


def test_readme_main_command_matches_ci_install() -> None:
    """The main job installs like CI, with the tools extra instead of the test extra, and runs generate-all; it keeps
    pip's bytecode compile, which the test command skips (the suite writes its own, README.md says why)."""
    ci = _ci_command()
    install, _, _ = ci.partition(" -e '.[test]' && ")
    assert install != ci, f"unexpected CI command: {ci}"
    assert " --no-compile " in install, install
    assert f"{install.replace(' --no-compile', '')} -e '.[tools]' && generate-all" in _readme_commands()


def test_the_pinned_torch_is_admitted_by_the_project() -> None:
    pins = [word for word in shlex.split(_ci_command()) if word.startswith("torch==")]
    assert len(pins) == 1, _ci_command()
    pinned = Version(pins[0].split("==", 1)[1])
    declared = next(d for d in PYPROJECT["project"]["dependencies"] if Requirement(d).name == "torch")
    assert pinned in Requirement(declared).specifier, (
        f"CI installs torch {pinned}, but pyproject.toml requires {declared}"
    )
    assert f"`{declared}`" in README, f"README should quote the project's torch range `{declared}`"


def test_readme_links_resolve() -> None:
    links = re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)(?:#[\w-]+)?\)", README)
    assert "docs/cli.md" in links and "docs/performance.md" in links
    for doc in (DOCS).glob("*.md"):
        links += [
            f"docs/{target}"
            for target in re.findall(r"\]\(([\w-]+\.md)(?:#[\w-]+)?\)", doc.read_text(encoding="utf-8"))
        ]
    missing = sorted({link for link in links if not (REPO_ROOT / link).is_file() and link != "docs/performance.md"})
    assert not missing, f"links to missing files: {missing}"
