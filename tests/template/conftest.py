"""Fixtures of the template tests: a template source built once per session, a fresh clone (no tags) per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .repos import build_template_source, clone, commit_all, copy_model, git, outside_zoo, upstream_prefix


@pytest.fixture(scope="session")
def template_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout, committed in a repository of its own, its zoo recording the template version; never changed."""
    return build_template_source(tmp_path_factory.mktemp("source") / "modelgraft")


@pytest.fixture
def repo(template_source: Path, tmp_path: Path) -> Path:
    """A ``git clone --no-tags`` of the template source, for one test to copy scaffolds into and change."""
    return clone(template_source, tmp_path / "modelgraft")


@pytest.fixture(scope="module")
def shared_clone(template_source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One clone per test module, for :func:`clean_clone`."""
    return clone(template_source, tmp_path_factory.mktemp("shared") / "modelgraft")


@pytest.fixture
def clean_clone(shared_clone: Path) -> Iterator[Path]:
    """The module's clone as committed, and so again after the test (every change reset, nothing untracked left):
    for tests that copy without committing or write nothing, where a clone per test costs more than the test."""
    assert git(shared_clone, "status", "--porcelain", "--untracked-files=all") == ""
    yield shared_clone
    git(shared_clone, "reset", "--quiet", "--hard")
    git(shared_clone, "clean", "-fdq")


@pytest.fixture(scope="session")
def scaffolded_models() -> tuple[str, str]:
    """The two dense models outside the zoo that :func:`scaffolded_source` copies (mistral and smollm3 until one of
    them joins the zoo)."""
    first = outside_zoo("dense")
    return first, outside_zoo("dense", besides=(first,))


@pytest.fixture(scope="session")
def scaffolded_source(
    template_source: Path, scaffolded_models: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The template source plus one commit adding two scaffolds outside the zoo (:func:`scaffolded_models`), copied
    at its template version, their modeling not generated; never changed."""
    first, second = scaffolded_models
    repo = clone(template_source, tmp_path_factory.mktemp("scaffolded") / "modelgraft")
    copy_model(repo, first, generate=False, prefix=upstream_prefix(first))
    commit_all(repo, f"add {first}")  # a copy needs a committed template source
    copy_model(repo, second, generate=False, prefix=upstream_prefix(second))
    git(repo, "reset", "--soft", "HEAD~1")
    commit_all(repo, f"add {first} and {second}")  # one commit: the tests count the commits after it
    return repo


@pytest.fixture
def repo_with_scaffolds(scaffolded_source: Path, tmp_path: Path) -> Path:
    """A ``git clone --no-tags`` of :func:`scaffolded_source`, for one test to change (copying two scaffolds
    costs each test about a second; a clone, a tenth of that)."""
    return clone(scaffolded_source, tmp_path / "modelgraft")
