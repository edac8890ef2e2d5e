"""The wheel is the package: built from the repository, installed alone, it runs a generated model anywhere.

Specification (docs/design.md, "Importing changes nothing"): ``pip wheel`` of the repository ships
``modelgraft.generator``, ``modelgraft.models`` (every generated module included) and ``modelgraft.scaffold``,
and no test folder and no ``modelgraft/models/testing`` (the parity harness, which needs pytest). Installed
with ``--no-deps --no-index`` into a fresh virtual environment that reaches torch and transformers through
a ``.pth`` line naming this environment's site-packages (a ``.pth`` line adds the folder to ``sys.path``
without running that folder's own ``.pth`` files, so the editable install of this checkout stays out of
sight), it runs a tiny generated model from a script outside the repository that has packages of its own
named ``models`` and ``generator`` next to it, with pytest unimportable. The wheel is built from a copy of
the checkout's files, so the build leaves nothing in the working tree; under pytest-xdist the workers share
one build and one environment (``wheel_builds.py``).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from wheel_builds import build_wheel, install_with_outer_environment, run, the_wheel

from modelgraft.models.registry import MODELING_REGISTRY

#: Marks the script's own top-level packages, which must win over anything the wheel might install.
DUMMY_OWNER = "the script next to me"

#: Runs outside the repository, with its own ``models`` and ``generator`` packages beside it.
SCRIPT = """
import json, sys
sys.modules["pytest"] = sys.modules["_pytest"] = None  # importing either now raises ImportError
import generator, models
import modelgraft.models
from modelgraft.models.registry import MODEL_CONFIG_REGISTRY, MODELING_REGISTRY
import torch

config = MODEL_CONFIG_REGISTRY["qwen3"](
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=8,
)
cls = MODELING_REGISTRY.get_class("qwen3", "Qwen3ForCausalLM")
with torch.no_grad():
    logits = cls(config).eval()(input_ids=torch.tensor([[1, 2, 3]])).logits
print(json.dumps({
    "models": getattr(models, "OWNER", None),
    "generator": getattr(generator, "OWNER", None),
    "modelgraft": modelgraft.models.__file__,
    "generated": sys.modules[cls.__module__].__file__,
    "logits": list(logits.shape),
    "finite": bool(torch.isfinite(logits).all()),
    "finders": [type(finder).__module__ for finder in sys.meta_path],
}))
"""


@pytest.fixture(scope="module")
def wheel(built_once: Callable[[str, Callable[[Path], None]], Path]) -> Path:
    return the_wheel(built_once("wheel", build_wheel))


@pytest.fixture(scope="module")
def wheel_names(wheel: Path) -> list[PurePosixPath]:
    with zipfile.ZipFile(wheel) as archive:
        return [PurePosixPath(name) for name in archive.namelist()]


@pytest.fixture(scope="module")
def environment(wheel: Path, built_once: Callable[[str, Callable[[Path], None]], Path]) -> Path:
    return built_once("venv", install_with_outer_environment(wheel))


@pytest.fixture(scope="module")
def script_run(environment: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    outside = tmp_path_factory.mktemp("outside")
    for package in ("models", "generator"):
        (outside / package).mkdir()
        (outside / package / "__init__.py").write_text(f"OWNER = {DUMMY_OWNER!r}\n", encoding="utf-8")
    (outside / "run_model.py").write_text(SCRIPT, encoding="utf-8")
    output = run([str(environment / "bin" / "python"), "run_model.py"], cwd=outside)
    return {**json.loads(output), "site": str(environment)}


def test_the_wheel_ships_no_test_folder(wheel_names: list[PurePosixPath]) -> None:
    assert [str(name) for name in wheel_names if "tests" in name.parts] == []


def test_the_wheel_ships_the_parity_harness_a_scaffolds_tests_import(wheel_names: list[PurePosixPath]) -> None:
    assert PurePosixPath("modelgraft/models/testing/parity.py") in wheel_names
    assert PurePosixPath("modelgraft/models/testing/declarations.py") in wheel_names


def test_the_wheel_ships_every_registered_generated_module(wheel_names: list[PurePosixPath]) -> None:
    modules = {PurePosixPath(*path.split(".")).with_suffix(".py") for path in MODELING_REGISTRY.module_paths()}
    assert sorted(str(module) for module in modules - set(wheel_names)) == []


def test_the_wheel_installs_only_under_the_modelgraft_namespace(wheel_names: list[PurePosixPath]) -> None:
    assert sorted({name.parts[0] for name in wheel_names} - {"modelgraft"}) == ["modelgraft-0.1.0.dist-info"]


def test_the_wheel_ships_modelgraft_as_a_regular_package(wheel_names: list[PurePosixPath]) -> None:
    """src/modelgraft/__init__.py, beside the three packages: no folder named modelgraft can shadow it."""
    assert PurePosixPath("modelgraft/__init__.py") in wheel_names
    assert {PurePosixPath(f"modelgraft/{p}/__init__.py") for p in ("generator", "models", "scaffold")} <= set(
        wheel_names
    )


def test_the_script_runs_a_generated_model_from_the_installed_wheel(script_run: dict[str, Any]) -> None:
    assert (script_run["logits"], script_run["finite"]) == ([1, 3, 64], True)
    assert script_run["generated"].startswith(script_run["site"]), script_run["generated"]


def test_the_script_imports_modelgraft_from_the_wheel_and_not_from_the_checkout(script_run: dict[str, Any]) -> None:
    assert script_run["modelgraft"].startswith(script_run["site"]), script_run["modelgraft"]
    assert [finder for finder in script_run["finders"] if "editable" in finder] == []


def test_the_script_s_own_models_and_generator_packages_are_the_ones_it_imports(script_run: dict[str, Any]) -> None:
    assert (script_run["models"], script_run["generator"]) == (DUMMY_OWNER, DUMMY_OWNER)
