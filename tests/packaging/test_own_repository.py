"""modelgraft inside a training framework's own repository, as a user meets it: modelgraft installed from its
wheel in a fresh environment, a new git repository with its own package of models, a model copied into it from
a clone of modelgraft, a VLM over that model copied next to it, their tests run there, and a template change
carried into both by ``scaffold-update``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from wheel_builds import build_wheel, copy_checkout, install_with_outer_environment, run, the_wheel

#: A text model outside modelgraft's zoo, and a VLM whose language model is of its type (transformers 5.25.0).
MODEL = "lfm3"
VLM = "lfm3_vl"
#: The VLM's test that its towers are generated classes, built through the registry.
TOWERS_TEST = f"models/{VLM}/tests/test_{VLM}_parity.py::TestLfm3VlParity::test_towers_are_the_generated_classes_of_their_sub_configs"
#: Commits made by the test, whatever the machine's git says.
IDENTITY = ["-c", "user.name=modelgraft test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]
PYPROJECT = '[project]\nname = "mytrainer"\nversion = "0.1"\n\n[tool.patchgen]\nroots = ["models"]\n'
TEMPLATE_LINE = "# a line the template gained after the copy\n"


def _git(repo: Path, *args: str) -> str:
    return run(["git", *IDENTITY, *args], cwd=repo)


def _repository(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    _git(folder, "init", "-q", "-b", "main")
    _git(folder, "add", "--all")
    _git(folder, "commit", "-q", "-m", "start")
    return folder


@pytest.fixture(scope="module")
def python(built_once: Callable[[str, Callable[[Path], None]], Path]) -> Path:
    """The fresh environment's interpreter: the wheel installed, torch and the tools reached from this one."""
    wheel = the_wheel(built_once("wheel", build_wheel))
    return built_once("venv", install_with_outer_environment(wheel)) / "bin" / "python"


@pytest.fixture(scope="module")
def trainer(python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A clone of this checkout as the template source, and ``mytrainer`` with a model copied into it, tested,
    committed, then updated after the template changed: the outputs of each step."""
    base = tmp_path_factory.mktemp("own-repository")
    source = copy_checkout(base / "modelgraft")
    _git(source, "init", "-q", "-b", "main")
    _git(source, "add", "--all")
    _git(source, "commit", "-q", "-m", "the template")
    repo = _repository(base / "mytrainer", {"pyproject.toml": PYPROJECT, "models/__init__.py": ""})

    copy = [str(python), "-m", "copier", "copy", "--trust", "--defaults", str(source)]
    copied = run([*copy, f"models/{MODEL}"], cwd=repo)
    copied_vlm = run([*copy, f"models/{VLM}"], cwd=repo)
    basetemp = ["--basetemp", str(base / "pytest-tmp")]  # not the shared root, whose cleanup races other sessions
    pytest_run = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *basetemp]
    tests = run([*pytest_run, f"models/{MODEL}", TOWERS_TEST], cwd=repo)
    where = run([str(python), "-c", "import modelgraft.models.testing as t; print(t.__file__)"], cwd=repo)
    _git(repo, "add", "--all")
    _git(repo, "commit", "-q", "-m", f"{MODEL} and {VLM}")

    template = source / "template" / "{{ model }}_gpu_patch_gen_config.py.jinja"
    template.write_text(template.read_text(encoding="utf-8") + TEMPLATE_LINE, encoding="utf-8")
    _git(source, "commit", "-q", "-am", "a template change")
    updated = run([str(python.parent / "scaffold-update")], cwd=repo)
    return {
        "repo": repo,
        "copied": copied,
        "copied_vlm": copied_vlm,
        "tests": tests,
        "harness": where.strip(),
        "updated": updated,
    }


@pytest.mark.heavy
def test_a_copy_into_a_training_repository_registers_the_repositorys_own_package(trainer: dict) -> None:
    init = (trainer["repo"] / "models" / MODEL / "__init__.py").read_text(encoding="utf-8")
    assert f'"gpu": "models.{MODEL}.generated.patched_modeling_{MODEL}_gpu"' in init
    assert "modelgraft.models." + MODEL not in init


def test_the_copy_generates_its_modeling_and_passes_its_smoke_check(trainer: dict) -> None:
    assert (trainer["repo"] / "models" / MODEL / "generated" / f"patched_modeling_{MODEL}_gpu.py").is_file()
    assert f"scaffold smoke check: models.{MODEL} matches upstream" in trainer["copied"]


def test_the_models_tests_pass_with_the_harness_of_the_installed_wheel(trainer: dict) -> None:
    assert " passed" in trainer["tests"] and " failed" not in trainer["tests"], trainer["tests"]
    assert "/site-packages/modelgraft/models/testing/" in trainer["harness"], trainer["harness"]


@pytest.mark.upstream_facts
def test_a_vlm_over_the_repositorys_own_text_model_imports_the_package_registering_it(trainer: dict) -> None:
    """Nothing else imports a training repository's packages, and the VLM builds its language model by type."""
    init = (trainer["repo"] / "models" / VLM / "__init__.py").read_text(encoding="utf-8")
    assert f"from .. import {MODEL}  # noqa: F401" in init


@pytest.mark.upstream_facts
def test_the_vlm_over_the_repositorys_own_text_model_passes_its_smoke_check(trainer: dict) -> None:
    assert f"scaffold smoke check: models.{VLM} matches upstream" in trainer["copied_vlm"]


@pytest.mark.parametrize("model", [MODEL, VLM])
def test_scaffold_update_carries_a_template_change_into_the_training_repository(trainer: dict, model: str) -> None:
    """The VLM's update renders the recorded and the new template version outside the repository, and its fit
    still finds the text model's package there."""
    assert f"models/{model}: updated" in trainer["updated"]
    config = trainer["repo"] / "models" / model / f"{model}_gpu_patch_gen_config.py"
    assert config.read_text(encoding="utf-8").endswith(TEMPLATE_LINE)
