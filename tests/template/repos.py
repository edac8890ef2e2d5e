"""Real git repositories for the template tests: a copy of this checkout as the template source, scaffolds in it.

In the spirit of Copier's own test helpers: ``git init``, commit and clone for real, no mocks, and no tags:
git tags do not travel with clones of this repository, so nothing may depend on them. The template's
source is the repository itself (``copier copy --trust . models/<m>`` from its root), so a test
repository is this checkout's working tree (tracked files and new ones git does not ignore) committed in
two steps, as a template change is: the first commit holds the template and is the template version; the
second makes every zoo answers file record that commit's id as ``_commit`` and leaves the template
alone, so the version stays the first commit. Tests work in ``git clone --no-tags`` clones of it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import copier
import yaml
from copier.errors import DirtyLocalWarning
from plumbum import local

from modelgraft.models.testing.preloaded_python import run_module
from modelgraft.scaffold.import_root import import_root

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Who commits in test repositories; no signing, whatever the machine's git configuration says.
_GIT_CONFIG = ("-c", "user.name=template tests", "-c", "user.email=tests@example.invalid")
_GIT_CONFIG += ("-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", "-c", "init.defaultBranch=main")


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo``; fail the test with git's message if it fails."""
    result = subprocess.run(["git", *_GIT_CONFIG, *args], cwd=repo, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"git {' '.join(args)} failed in {repo}:\n{result.stdout}{result.stderr}"
    return result.stdout


def commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--allow-empty", "-m", message)


def template_version(repo: Path) -> str:
    """The current template version: the full id of the last commit that changed copier.yml or template/."""
    version = git(repo, "log", "-1", "--format=%H", "--", "copier.yml", "template").strip()
    assert re.fullmatch(r"[0-9a-f]{40}", version), f"no commit of {repo} holds the template"
    return version


def checkout_files() -> list[str]:
    """This checkout as git sees it: tracked files that exist and new files that are not ignored."""
    listed = git(REPO_ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return sorted({path for path in listed.split("\0") if path and (REPO_ROOT / path).is_file()})


#: The template version a scaffold was made from or last updated to, as Copier records it.
_RECORDED_VERSION = re.compile(r"^_commit: .*$", re.MULTILINE)


def record_version(repo: Path, version: str) -> None:
    """Make every zoo scaffold of ``repo`` record ``version``: the ``_commit`` line of its answers, nothing else."""
    for answers in repo.glob("models/*/.copier-answers.yml"):
        text = answers.read_text(encoding="utf-8")
        answers.write_text(_RECORDED_VERSION.sub(f"_commit: {version}", text, count=1), encoding="utf-8")


def build_template_source(folder: Path) -> Path:
    """A git repository holding this checkout's files, its zoo recording its first commit: the template source."""
    folder.mkdir(parents=True)
    for path in checkout_files():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / path, folder / path)
    git(folder, "init", "--quiet")
    commit_all(folder, "modelgraft: the template")
    record_version(folder, template_version(folder))
    commit_all(folder, "the zoo records the template version")
    assert template_version(folder) == git(folder, "rev-parse", "HEAD~1").strip()
    return folder


def clone(source: Path, folder: Path) -> Path:
    """A fresh clone without tags, as every clone of this repository is."""
    git(source.parent, "clone", "--quiet", "--no-tags", str(source), str(folder))
    assert git(folder, "tag", "--list") == ""
    return folder


@contextmanager
def working_directory(path: Path) -> Iterator[None]:
    """Run Copier in-process in ``path``: its tasks, child processes, import modelgraft from ``path`` itself.

    Copier starts its tasks with plumbum's copy of the environment, so the variable is set there too.
    """
    previous = Path.cwd()
    os.chdir(path)
    try:
        with local.env(PYTHONPATH=str(import_root(path))):
            yield
    finally:
        os.chdir(previous)


def copy_model(repo: Path, model: str, /, *, generate: bool = True, record: bool = True, **answers: Any) -> Path:
    """``copier copy --trust --defaults . models/<model>`` in ``repo``; ``generate`` runs the template's task.

    Without tags Copier copies from ``HEAD`` and records its abbreviated id; ``record`` then writes the full id
    of the template version instead, as ``scaffold-update models/<model>`` does after a copy (test_update.py
    runs that command on a scaffold as Copier leaves it).
    """
    with working_directory(repo), warnings.catch_warnings():
        warnings.simplefilter("error", DirtyLocalWarning)  # a test repository is always committed
        copier.run_copy(
            ".",
            f"models/{model}",
            data=answers,
            defaults=True,
            overwrite=True,
            unsafe=True,
            quiet=True,
            skip_tasks=not generate,
        )
    model_dir = repo / "models" / model
    if record:
        answers_file = model_dir / ".copier-answers.yml"
        text = answers_file.read_text(encoding="utf-8")
        head = git(repo, "rev-parse", "HEAD").strip()
        recorded = yaml.safe_load(text)["_commit"]
        assert head.startswith(str(recorded)), f"Copier recorded {recorded!r}, not HEAD {head}"
        answers_file.write_text(
            _RECORDED_VERSION.sub(f"_commit: {template_version(repo)}", text, count=1), encoding="utf-8"
        )
    return model_dir


def copy_and_generate(repo: Path, model: str, /, **answers: Any) -> Path:
    """A copy without the template's tasks, then the generator as the first task runs it: no smoke check.

    The smoke check is a subset of the model's own tests, which the structure tests run anyway; its own
    behaviour (and the tasks of a real copy) is tested where the copy runs them.
    """
    model_dir = copy_model(repo, model, generate=False, **answers)
    config = f"models.{model}.{model}_gpu_patch_gen_config"
    generated = run(repo, "-m", "modelgraft.generator", config, "--diff")
    assert generated.returncode == 0, generated.stdout + generated.stderr
    return model_dir


def recorded_answers(model_dir: Path) -> dict[str, Any]:
    """The answers a scaffold's ``.copier-answers.yml`` records, without Copier's own ``_src_path`` / ``_commit``."""
    answers = yaml.safe_load((model_dir / ".copier-answers.yml").read_text(encoding="utf-8"))
    return {key: value for key, value in answers.items() if not key.startswith("_")}


def run(repo: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python <args>`` in ``repo``, with this interpreter, importing modelgraft from ``repo`` itself.

    ``-m pytest`` runs in a process that starts with torch and transformers imported (and nothing of modelgraft):
    a scaffold's tests pay for those imports once per test process, not once per run.
    """
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "PYTEST_ADDOPTS"}}
    env["PYTHONPATH"] = str(import_root(repo))
    if args[:2] == ("-m", "pytest"):
        return run_module("pytest", *args[2:], cwd=repo, env=env, timeout=timeout)
    return subprocess.run(
        [sys.executable, *args], cwd=repo, env=env, capture_output=True, text=True, check=False, timeout=timeout
    )


def ruff(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed ruff (as the generator finds it), with ``repo``'s own settings."""
    from ruff.__main__ import find_ruff_bin

    return subprocess.run(
        [str(find_ruff_bin()), *args], cwd=repo, capture_output=True, text=True, check=False, timeout=120
    )
