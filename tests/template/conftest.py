"""Fixtures of the template tests: a template source built once per run, a fresh clone (no tags) per test.

The two sources every clone is made from (:func:`template_source`, :func:`scaffolded_source`) are never changed, so
they are built once per run and shared by the xdist workers (the root conftest's ``built_once``) instead of once per
worker: the scaffolded one costs two Copier copies. One source for both workers also gives their clones the same
commit ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .repos import build_template_source, clone, commit_all, copy_model, git, outside_zoo, upstream_prefix


@pytest.fixture(scope="session")
def template_source(built_once: Callable[[str, Callable[[Path], None]], Path]) -> Path:
    """This checkout, committed in a repository of its own, its zoo recording the template version; never changed."""
    return built_once("template-source", lambda folder: build_template_source(folder / "modelgraft")) / "modelgraft"


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
    template_source: Path,
    scaffolded_models: tuple[str, str],
    built_once: Callable[[str, Callable[[Path], None]], Path],
) -> Path:
    """The template source plus one commit adding two scaffolds outside the zoo (:func:`scaffolded_models`), copied
    at its template version, their modeling not generated; never changed."""
    first, second = scaffolded_models

    def build(folder: Path) -> None:
        repo = clone(template_source, folder / "modelgraft")
        copy_model(repo, first, generate=False, prefix=upstream_prefix(first))
        commit_all(repo, f"add {first}")  # a copy needs a committed template source
        copy_model(repo, second, generate=False, prefix=upstream_prefix(second))
        git(repo, "reset", "--soft", "HEAD~1")
        commit_all(repo, f"add {first} and {second}")  # one commit: the tests count the commits after it

    return built_once("scaffolded-source", build) / "modelgraft"


@pytest.fixture
def repo_with_scaffolds(scaffolded_source: Path, tmp_path: Path) -> Path:
    """A ``git clone --no-tags`` of :func:`scaffolded_source`, for one test to change (copying two scaffolds
    costs each test about a second; a clone, a tenth of that)."""
    return clone(scaffolded_source, tmp_path / "modelgraft")
