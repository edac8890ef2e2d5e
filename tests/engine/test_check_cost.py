"""A warm ``patchgen --check`` on an unchanged tree stays cheap: it loads no engine, no config and reads no upstream.

The check cache answers every config, so the check must not import the pipeline (planning, assembly),
the upstream reader, jinja2, ruff's runner or ``importlib.metadata`` (versions come from
``generator.installed``): docs/performance.md, "Generator".
"""

from __future__ import annotations

import json

import pytest

from .projects import Project
from .test_drift import zoo  # noqa: F401  (the fixture)

HEAVY = (
    "modelgraft.generator.pipeline",
    "modelgraft.generator.upstream.index",
    "jinja2",
    "subprocess",
    "importlib.metadata",
    "email",
)

SCRIPT = """
import contextlib, io, sys

from modelgraft.generator.cli import main

with contextlib.redirect_stdout(io.StringIO()):
    assert main(["--check"]) == 0
print(sorted(m for m in {heavy!r} if m in sys.modules))
"""


def test_a_warm_check_imports_no_engine_and_reads_no_upstream(zoo: Project) -> None:  # noqa: F811
    result = zoo.run_subprocess(code=SCRIPT.format(heavy=HEAVY))

    assert result.code == 0, result.err
    assert result.out.strip() == "[]"


def _count_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Module names of the configs the CLI loads from now on."""
    from modelgraft.generator import cli

    loaded: list[str] = []
    real = cli.load_config

    def load_config(module_name: str, *args, **kwargs):
        loaded.append(module_name)
        return real(module_name, *args, **kwargs)

    monkeypatch.setattr(cli, "load_config", load_config)
    return loaded


def test_a_check_the_cache_answers_for_every_config_loads_none(zoo: Project, monkeypatch) -> None:  # noqa: F811
    loaded = _count_loads(monkeypatch)

    result = zoo.run("--check", "-v")

    assert result.code == 0, result.out + result.err
    assert "2 config(s) up to date" in result.out
    assert loaded == []


def test_an_entry_naming_its_module_in_another_output_folder_is_not_trusted(zoo: Project) -> None:  # noqa: F811
    pyproject = zoo.root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8") + 'output_subdir = "gen"\n', encoding="utf-8")

    result = zoo.run("--check")

    assert result.code == 1
    assert "drift: zoo/toy/gen/patched_modeling_toy_gpu.py (missing)" in result.out


def test_an_entry_that_names_no_module_is_answered_by_loading_the_configs(zoo: Project, monkeypatch) -> None:  # noqa: F811
    from modelgraft.generator.cache import _entry_checksum

    cache_file = zoo.root / ".patchgen_cache/check-cache.json"
    data = json.loads(cache_file.read_text(encoding="utf-8"))
    for entry in data["entries"].values():
        del entry["output"]
        entry["checksum"] = _entry_checksum(entry)
    cache_file.write_text(json.dumps(data), encoding="utf-8")
    loaded = _count_loads(monkeypatch)

    result = zoo.run("--check")

    assert result.code == 0, result.out + result.err
    assert sorted(loaded) == sorted(n for n in data["entries"])
