"""Fixtures of the template tests: a template source built once per session, a fresh clone (no tags) per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from .repos import build_template_source, clone


@pytest.fixture(scope="session")
def template_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout, committed in a repository of its own, its zoo recording the template version; never changed."""
    return build_template_source(tmp_path_factory.mktemp("source") / "modelgraft")


@pytest.fixture
def repo(template_source: Path, tmp_path: Path) -> Path:
    """A ``git clone --no-tags`` of the template source, for one test to copy scaffolds into and change."""
    return clone(template_source, tmp_path / "modelgraft")
