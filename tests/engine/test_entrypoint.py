"""One exit-status table for every console script: 0 ok, 1 drift or conflict, 2 bad input, 3 a bug (traceback)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from modelgraft.generator import entrypoint
from modelgraft.generator.entrypoint import TOOLS_MODULES, ExitStatus, missing_tools, run_script
from modelgraft.generator.errors import PatchgenError, UserError

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]

#: Each console script and the function its entry point runs the work through (the one a bug is planted in).
WORK = {
    "patchgen": ("modelgraft.generator.cli", "run"),
    "generate-all": ("modelgraft.generator.cli", "run"),
    "patchgen-pin": ("modelgraft.generator.pinbump.cli", "run"),
    "patchgen-inspect": ("modelgraft.generator.inspect_cli", "run"),
    "scaffold-update": ("modelgraft.scaffold.update", "run"),
    "scaffold-conflicts": ("modelgraft.scaffold.conflict_check", "run"),
    "scaffold-survey": ("modelgraft.scaffold.survey.cli", "_survey"),
}


def test_the_table_is_0_ok_1_findings_2_bad_input_3_internal() -> None:
    assert [(status.name, int(status)) for status in ExitStatus] == [
        ("OK", 0),
        ("FINDINGS", 1),
        ("BAD_INPUT", 2),
        ("INTERNAL", 3),
    ]


@pytest.mark.parametrize("status", [0, 1])
def test_what_the_work_returns_is_the_exit_status(status: int) -> None:
    assert run_script("tool", lambda: status) == status


def test_a_user_error_exits_2_with_one_line_naming_the_tool(capsys: pytest.CaptureFixture[str]) -> None:
    def bad_input() -> int:
        raise UserError("models/x is not a scaffold (no .copier-answers.yml)")

    assert run_script("tool", bad_input) == ExitStatus.BAD_INPUT
    assert capsys.readouterr().err == "tool: error: models/x is not a scaffold (no .copier-answers.yml)\n"


def test_a_generator_error_names_its_config_target_and_cause(capsys: pytest.CaptureFixture[str]) -> None:
    def bad_config() -> int:
        raise PatchgenError("upstream has no such class", config="models.x.x_gpu_patch_gen_config", target="Nope")

    assert run_script("patchgen", bad_config) == ExitStatus.BAD_INPUT
    assert capsys.readouterr().err == (
        "patchgen: error: config models.x.x_gpu_patch_gen_config, target Nope: upstream has no such class\n"
    )


def test_any_other_exception_exits_3_with_its_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    def bug() -> int:
        raise KeyError("a bug")

    assert run_script("tool", bug) == ExitStatus.INTERNAL
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "KeyError: 'a bug'" in err
    assert "tool: internal error" in err


def test_argparse_exits_pass_through_untouched() -> None:
    def usage_error() -> int:
        raise SystemExit(2)

    with pytest.raises(SystemExit) as exited:
        run_script("tool", usage_error)
    assert exited.value.code == 2


def test_every_console_script_is_covered_here() -> None:
    assert set(WORK) == set(SCRIPTS)


@pytest.mark.parametrize("script", sorted(WORK))
def test_every_console_script_maps_a_bug_to_3_with_a_traceback(
    script: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module_name, work = WORK[script]

    def bug(*args: object, **kwargs: object) -> int:
        raise RuntimeError(f"a planted bug in {script}")

    monkeypatch.setattr(importlib.import_module(module_name), work, bug)
    entry_module, entry = SCRIPTS[script].split(":")
    main = getattr(importlib.import_module(entry_module), entry)

    assert main([]) == ExitStatus.INTERNAL
    err = capsys.readouterr().err
    assert f"RuntimeError: a planted bug in {script}" in err and "Traceback (most recent call last)" in err


@pytest.mark.parametrize("script", sorted(WORK))
def test_every_console_script_maps_bad_input_to_2_with_one_error_line(
    script: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module_name, work = WORK[script]

    def bad_input(*args: object, **kwargs: object) -> int:
        raise UserError("the cause")

    monkeypatch.setattr(importlib.import_module(module_name), work, bad_input)
    entry_module, entry = SCRIPTS[script].split(":")
    main = getattr(importlib.import_module(entry_module), entry)

    assert main([]) == ExitStatus.BAD_INPUT
    prog = "patchgen" if script == "generate-all" else script
    assert capsys.readouterr().err == f"{prog}: error: the cause\n"


def test_a_console_script_process_exits_with_the_status_of_the_table(tmp_path: Path) -> None:
    """A real process: outside a git repository, scaffold-conflicts is bad input (2), not a conflict (1)."""
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from modelgraft.scaffold.conflict_check import main; sys.exit(main())"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"scaffold-conflicts: error: git rev-parse --show-toplevel failed in {tmp_path}")


def test_every_entry_point_launches_its_own_script(monkeypatch: pytest.MonkeyPatch) -> None:
    """[project.scripts] points at generator/entrypoint.py, whose SCRIPTS names the work of every script."""
    assert set(entrypoint.SCRIPTS) == set(SCRIPTS)
    launched = []
    monkeypatch.setattr(entrypoint, "launch", lambda prog, argv=None: launched.append((prog, argv)) or 0)
    for script, entry in sorted(SCRIPTS.items()):
        module, _, function = entry.partition(":")
        assert module == "modelgraft.generator.entrypoint", entry
        assert getattr(entrypoint, function)(["--x"]) == 0
        assert launched.pop() == (script, ["--x"])
    for target in entrypoint.SCRIPTS.values():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), target


def test_with_the_tools_installed_none_is_missing() -> None:
    assert missing_tools() == []


def _without_tools(code: str, modules: frozenset[str] = TOOLS_MODULES) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter in which importing any of ``modules`` fails as if uninstalled."""
    hide = f"import sys\nfor name in {sorted(modules)!r}:\n    sys.modules[name] = None\n"
    return subprocess.run(
        [sys.executable, "-c", hide + code], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_without_the_tools_extra_every_console_script_exits_2_with_one_line_naming_it(script: str) -> None:
    """Even --help: the script names the extra before it imports its tool, and prints no traceback."""
    module, _, function = SCRIPTS[script].partition(":")
    result = _without_tools(f"from {module} import {function}\nsys.exit({function}(['--help']))")

    needed = sorted(TOOLS_MODULES)
    assert "copier" in needed and "ruff" in needed
    assert result.returncode == ExitStatus.BAD_INPUT, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"{script}: error: {', '.join(needed)} are not installed: {script} needs modelgraft's "
        "tools extra: pip install 'modelgraft[tools]' (in a checkout: pip install -e '.[tools]')\n"
    )


def test_a_tool_missing_while_a_script_runs_exits_2_with_one_line_naming_the_extra() -> None:
    """Past the launcher (``python -m modelgraft.scaffold.update``, a lazy import): the same line, from run_script."""
    result = _without_tools(
        "from modelgraft.generator.entrypoint import run_script\n"
        "def work():\n"
        "    import copier\n"
        "sys.exit(run_script('scaffold-update', work))\n",
        frozenset({"copier"}),
    )

    assert result.returncode == ExitStatus.BAD_INPUT, result.stderr
    assert result.stderr == (
        "scaffold-update: error: copier is not installed: scaffold-update needs modelgraft's tools extra: "
        "pip install 'modelgraft[tools]' (in a checkout: pip install -e '.[tools]')\n"
    )


def test_a_module_missing_that_no_extra_installs_is_a_bug(capsys: pytest.CaptureFixture[str]) -> None:
    def work() -> int:
        importlib.import_module("modelgraft_no_such_module")  # by name: no import that test_dependencies reads
        return 0

    assert run_script("tool", work) == ExitStatus.INTERNAL
    assert "ModuleNotFoundError: No module named 'modelgraft_no_such_module'" in capsys.readouterr().err
