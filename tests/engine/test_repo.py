"""The shipped zoo: its generated files are up to date, and its configs stay cheap to load."""

from __future__ import annotations

import sys

from .projects import REPO_ROOT, run_python


def test_the_shipped_zoo_is_up_to_date():
    result = run_python([sys.executable, "-m", "modelgraft.generator", "--check"], cwd=REPO_ROOT, pythonpath=[])

    assert result.code == 0, result.out + result.err


def test_the_shipped_zoo_is_up_to_date_without_the_check_cache():
    result = run_python(
        [sys.executable, "-m", "modelgraft.generator", "--check", "--no-cache"], cwd=REPO_ROOT, pythonpath=[]
    )

    assert result.code == 0, result.out + result.err


def test_loading_every_real_config_imports_neither_torch_nor_transformers():
    script = """
import sys

from modelgraft.generator.discovery import discover, find_settings, load_config

settings = find_settings()
names = discover(settings)
loaded = [load_config(name, settings) for name in names]
assert len(loaded) >= 3, names
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
assert not heavy, heavy
print(len(loaded))
"""
    result = run_python([sys.executable, "-c", script], cwd=REPO_ROOT, pythonpath=[REPO_ROOT])

    assert result.code == 0, result.err
    assert int(result.out) >= 3


def test_listing_the_real_zoo_imports_neither_torch_nor_transformers():
    script = """
import contextlib, io, sys

from modelgraft.generator.cli import main

with contextlib.redirect_stdout(io.StringIO()):
    assert main(["--list"]) == 0
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
assert not heavy, heavy
"""
    result = run_python([sys.executable, "-c", script], cwd=REPO_ROOT, pythonpath=[REPO_ROOT])

    assert result.code == 0, result.err
