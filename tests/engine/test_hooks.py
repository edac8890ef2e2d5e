"""The pre-commit hooks of ``.pre-commit-hooks.yaml``, run as pre-commit runs them: their entry, in a git repository.

Each hook's ``entry`` is run as a real process (the installed console script) at the root of a temporary
git repository holding a generated zoo with one scaffold: clean, both pass; with a hand-edited generated
file, ``patchgen-check`` fails; with a conflict marker in the scaffold, ``scaffold-conflicts`` fails.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .projects import REPO_ROOT, Project, Result, config_source, run_python

TOY = "zoo/toy/generated/patched_modeling_toy_gpu.py"
GPU = """
@config.override_method("ToyMLP.forward", description="no scale")
def mlp_forward(self, x):
    return toy_activation(x)
"""
HOOKS = yaml.safe_load((REPO_ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
LOCAL = yaml.safe_load((REPO_ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
_GIT = ("-c", "user.name=hook tests", "-c", "user.email=tests@example.invalid", "-c", "commit.gpgsign=false")


def _entry(hook_id: str) -> list[str]:
    """The command line the hook runs, its console script resolved in this interpreter's environment."""
    (hook,) = [h for h in HOOKS if h["id"] == hook_id]
    command = shlex.split(hook["entry"])
    script = shutil.which(command[0], path=str(Path(sys.executable).parent))
    assert script, f"{command[0]} is not installed next to {sys.executable}: pip install -e '.[test]'"
    return [script, *command[1:]]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *_GIT, *args], cwd=repo, check=True, capture_output=True, text=True)


@pytest.fixture
def repo(project: Project) -> Project:
    """A committed git repository: one generated config, its folder a scaffold (it has Copier answers)."""
    project.config("toy", config_source(GPU))
    project.write("zoo/toy/.copier-answers.yml", "_commit: 0123456789abcdef0123456789abcdef01234567\nmodel: toy\n")
    project.write("zoo/toy/NOTES.md", "# toy\n\nA scaffold.\n")
    assert project.generate_all("-q").code == 0
    _git(project.root, "init", "--quiet")
    _git(project.root, "add", "--all")
    _git(project.root, "commit", "--quiet", "-m", "zoo")
    return project


def hook(project: Project, hook_id: str) -> Result:
    return run_python(_entry(hook_id), cwd=project.root, pythonpath=[REPO_ROOT, project.site])


def test_the_hooks_are_declared_as_pre_commit_expects():
    assert [h["id"] for h in HOOKS] == ["patchgen-check", "scaffold-conflicts"]
    for h in HOOKS:
        assert {"id", "name", "entry", "language"} <= set(h), h
        assert h["pass_filenames"] is False and h["always_run"] is True, h
    assert _entry("patchgen-check")[1:] == ["--check"]


def test_this_repository_runs_the_same_hooks_and_ruff():
    local = next(r for r in LOCAL["repos"] if r["repo"] == "local")
    assert {h["id"]: h["entry"] for h in local["hooks"]} == {h["id"]: h["entry"] for h in HOOKS}
    ruff = next(r for r in LOCAL["repos"] if r["repo"].endswith("/ruff-pre-commit"))
    pinned = next(line for line in (REPO_ROOT / "pyproject.toml").read_text().splitlines() if '"ruff==' in line)
    assert ruff["rev"] == "v" + pinned.split("==")[1].rstrip('",'), "ruff-pre-commit is not at the pinned ruff"
    assert {h["id"] for h in ruff["hooks"]} == {"ruff-check", "ruff-format"}


def test_both_hooks_pass_on_a_clean_repository(repo):
    for hook_id in ("patchgen-check", "scaffold-conflicts"):
        result = hook(repo, hook_id)
        assert result.code == 0, f"{hook_id}: {result.out}{result.err}"


def test_patchgen_check_fails_on_a_drifted_generated_file(repo):
    path = repo.root / TOY
    path.write_text(path.read_text(encoding="utf-8").replace("return toy_activation(x)", "return x"), encoding="utf-8")

    result = hook(repo, "patchgen-check")

    assert result.code == 1, result.out + result.err
    assert f"drift: {TOY} (differs)" in result.out
    assert hook(repo, "scaffold-conflicts").code == 0


def test_scaffold_conflicts_fails_on_a_conflict_marker_in_a_scaffold(repo):
    notes = repo.root / "zoo/toy/NOTES.md"
    notes.write_text(
        "# toy\n\n<<<<<<< before updating\nA scaffold.\n=======\nA model.\n>>>>>>> after updating\n", encoding="utf-8"
    )

    result = hook(repo, "scaffold-conflicts")

    assert result.code == 1, result.out + result.err
    assert "zoo/toy/NOTES.md: conflict markers" in result.out
    assert hook(repo, "patchgen-check").code == 0


def test_scaffold_conflicts_fails_on_a_rej_file_and_names_bad_input(repo):
    (repo.root / "zoo/toy/NOTES.md.rej").write_text("@@ -1 +1 @@\n", encoding="utf-8")

    result = hook(repo, "scaffold-conflicts")

    assert result.code == 1
    assert "zoo/toy/NOTES.md.rej: rejected hunks" in result.out
    not_a_scaffold = run_python(
        [*_entry("scaffold-conflicts"), "zoo"], cwd=repo.root, pythonpath=[REPO_ROOT, repo.site]
    )
    assert not_a_scaffold.code == 2 and "is not a scaffold" in not_a_scaffold.err
