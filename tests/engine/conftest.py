"""Fixtures of the engine tests: a throwaway project next to a fake upstream package."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .projects import Project, fresh_process_state, write_toy_upstream


@contextmanager
def toy_project(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """An empty zoo project in ``folder``; ``toyupstream`` 1.0 is "installed" next to it."""
    site = folder / "site"
    write_toy_upstream(site)
    monkeypatch.syspath_prepend(str(site))
    fresh_process_state(monkeypatch)
    try:
        yield Project(folder / "project", site, monkeypatch)
    finally:
        fresh_process_state(monkeypatch)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    with toy_project(tmp_path, monkeypatch) as built:
        yield built


@pytest.fixture
def snippet_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private snippet library: generator.snippets reads its templates from here for this test."""
    from modelgraft.generator import snippets

    folder = tmp_path / "snippets"
    folder.mkdir()
    monkeypatch.setattr(snippets, "SNIPPET_DIR", folder)
    yield folder
