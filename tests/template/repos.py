"""Real git repositories for the template tests: a copy of this checkout as the template source, scaffolds in it.

In the spirit of Copier's own test helpers: ``git init``, commit and clone for real, no mocks, and no tags:
git tags do not travel with clones of this repository, so nothing may depend on them. The template's
source is the repository itself (``copier copy --trust . models/<m>`` from its root), so a test
repository is this checkout's working tree (tracked files and new ones git does not ignore) committed in
two steps, as a template change is: the first commit holds the template and is the template version; the
second makes every zoo answers file record that commit's id as ``_commit`` and leaves the template
alone, so the version stays the first commit. Tests work in ``git clone --no-tags`` clones of it. A test that
copies "a model outside the zoo" takes one from :func:`outside_zoo`, never a fixed name: the zoo grows with
every model a user scaffolds into this repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import copier
import yaml
from copier.errors import DirtyLocalWarning
from plumbum import local

from modelgraft.generator.upstream.reader import read_model
from modelgraft.models.testing.preloaded_python import run_module
from modelgraft.scaffold.import_root import import_root
from modelgraft.scaffold.survey.population import zoo_models

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Upstream models the scaffold copies and whose own tests pass (docs/scaffolding.md, "How far the scaffold
#: reaches"), by what a test needs of one, in order of preference: the tests copy the first that is not in the
#: zoo (:func:`outside_zoo`), so a model a user scaffolds into this repository hands its place to the next.
OUTSIDE_ZOO_CANDIDATES: dict[str, tuple[str, ...]] = {
    # Llama-like: one RMSNorm class, a gated MLP, RoPE, both heads; every structure guarded, nothing skipped.
    "dense": ("mistral", "smollm3", "olmo2", "ministral", "olmo3", "exaone4", "minicpm3"),
    # An MLP that is not gated (up -> act -> down), whose activation the scaffold records in __init__.
    "dense_plain_mlp": ("starcoder2", "gpt_neox", "persimmon", "gpt_neox_japanese"),
    # An old decoder: nn.LayerNorm modules and an ACT2FN activation called in its blocks, no norm class. GPT-2 first:
    # its causal LM is GPT2LMHeadModel, found by transformers' Auto causal-LM table rather than by its name.
    "dense_layer_norm_calls": ("gpt2", "gpt_neo", "gptj", "codegen", "biogpt", "mpt"),
    # MoE with a shared expert behind a sigmoid gate (shared_expert_gate).
    "moe_gated_shared_expert": ("qwen2_moe", "qwen3_next"),
    # MoE guarding so many slots that its parity test's guarded= tuple takes more than one line, ruff-clean as
    # rendered (qwen3_next is not yet: its parity test's imports are rendered out of order).
    "moe_many_slots": ("qwen2_moe", "mixtral", "mellum", "axk1", "phimoe"),
    # MoE whose hub checkpoints name the experts' projections otherwise than gate_proj/up_proj/down_proj.
    "moe_hub_projection_names": ("mixtral", "minimax_m2", "phimoe"),
    # MoE with DeepSeek's sigmoid group-limited router (a correction bias) and shared experts.
    "moe_group_limited_router": ("glm4_moe", "dots1", "solar_open", "exaone_moe", "glm4_moe_lite"),
}


def outside_zoo(kind: str, *, besides: tuple[str, ...] = ()) -> str:
    """The first model of ``kind`` (:data:`OUTSIDE_ZOO_CANDIDATES`) that has no package in this checkout's models/.

    ``besides``: models the caller has taken already. The zoo is what the scaffold survey leaves out: every
    ``models/<m>/`` holding a patch config. Fails the test only when every candidate is taken.
    """
    zoo = zoo_models(REPO_ROOT)
    free = [model for model in OUTSIDE_ZOO_CANDIDATES[kind] if model not in zoo and model not in besides]
    candidates = ", ".join(OUTSIDE_ZOO_CANDIDATES[kind])
    assert free, (
        f"every {kind} model the template tests may copy is in the zoo or taken ({candidates}): add another "
        "upstream model of that kind that the scaffold passes to OUTSIDE_ZOO_CANDIDATES in tests/template/repos.py "
        "(docs/scaffolding.md, 'How far the scaffold reaches')"
    )
    return free[0]


def upstream_prefix(model: str) -> str:
    """The class prefix the upstream reader finds for ``model`` (``SmolLM3``), which the scaffold records."""
    return read_model(model).prefix


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
    # Every clone of it, and each of Copier's clones of those, hardlinks the objects: one pack rather than a
    # thousand loose files, as in a repository git has packed (about 0.04 s a clone on tmpfs, 0.3 s on disk).
    git(folder, "repack", "-a", "-d", "-q")
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


def without(repo: Path, model: str) -> Path:
    """``repo`` without ``models/<model>``: removed and committed where the clone holds it (a user scaffolded it).

    For a test that must copy that very model, the only one of its kind the scaffold copies (GLM-4V, the VLM
    outside the Qwen-VL family; olmo_hybrid, the dense Gated DeltaNet hybrid), as test_copy_omni.py copies the
    zoo's Qwen2.5-Omni again.
    """
    if (repo / "models" / model).exists():
        git(repo, "rm", "-r", "--quiet", f"models/{model}")
        commit_all(repo, f"{model} removed, to be scaffolded again")
    return repo


@contextmanager
def writes_nothing(repo: Path, model: str) -> Iterator[None]:
    """Around a copy into ``models/<model>`` of ``repo`` that must be refused: the clone is left as it was.

    git sees no change, and ``models/<model>`` exists afterwards only where it did before (a zoo model's own
    package: a refusal is the same whether or not the zoo holds the model), never as a new, empty folder.
    """
    destination = repo / "models" / model
    existed = destination.exists()
    status = git(repo, "status", "--porcelain", "--untracked-files=all")
    yield
    assert destination.exists() == existed, f"a refused copy must leave nothing behind: {destination}"
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == status, "a refused copy wrote files"


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
        # A base folder of its own: pytest sessions of other workers sharing the default root race in removing its
        # pytest-current link at their end, and the loser exits 1 after its tests passed.
        with tempfile.TemporaryDirectory(prefix="scaffold-tests-") as private:
            basetemp = ("--basetemp", str(Path(private) / "tmp"))
            return run_module("pytest", *args[2:], *basetemp, cwd=repo, env=env, timeout=timeout)
    return subprocess.run(
        [sys.executable, *args], cwd=repo, env=env, capture_output=True, text=True, check=False, timeout=timeout
    )


def ruff(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed ruff (as the generator finds it), with ``repo``'s own settings."""
    from ruff.__main__ import find_ruff_bin

    return subprocess.run(
        [str(find_ruff_bin()), *args], cwd=repo, capture_output=True, text=True, check=False, timeout=120
    )
