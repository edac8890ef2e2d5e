"""The installation layers, from the built wheel's own metadata: the base install runs models without the tools.

Specification (README, "Installation layers"): the wheel's base requirements (``Requires-Dist`` of no extra)
name none of the generator's and the scaffolder's tools; the ``tools`` extra names them, and the ``test``
extra pulls the tools extra. Installed into a fresh virtual environment with only what its base
requirements need, recursively (``wheel_builds.install_with_base_requirements``: the distributions pip would
install, linked from this environment), the wheel imports ``modelgraft.models`` and builds and runs a tiny
generated model from a folder outside the repository. That environment has no copier, ruff or plumbum at all;
torch and transformers bring jinja2, rich, pyyaml and pydantic with them, and ``import transformers`` itself
imports the first three, so building and running the generated model is held to importing no module of the
tools that running upstream's model in the same process had not imported already. A console script there exits 2 with one line that names the tools extra.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from wheel_builds import base_requirements, build_wheel, closure, install_with_base_requirements, requires_dist, run
from wheel_builds import the_wheel as find_wheel

from modelgraft.generator.entrypoint import TOOLS_MODULES

#: Distributions that must not be in the base requirements (the tools, and what Copier brings).
NOT_IN_THE_BASE = ("copier", "ruff", "jinja2", "pydantic", "rich", "plumbum", "pyyaml", "tomli")
#: Of the tools, those a base install does not install at all (the rest come with torch or transformers).
NOT_INSTALLED = ("copier", "ruff", "plumbum")
#: The modules a run is watched for: every module of the tools extra, and Copier's pydantic.
WATCHED = sorted(TOOLS_MODULES | {"pydantic"})

#: Imports the models, runs a tiny Qwen3 through upstream's class, then the generated one through the library's
#: entry point, and reports which watched modules each step had imported.
SCRIPT = """
import importlib.metadata, importlib.util, json, sys
sys.modules["pytest"] = sys.modules["_pytest"] = None  # importing either now raises ImportError
WATCHED = {watched!r}
def watched():
    return sorted(m for m in WATCHED if m in sys.modules)

import modelgraft.models
after_import = watched()
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM
config = Qwen3Config(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=8,
)
with torch.no_grad():
    Qwen3ForCausalLM(config).eval()(input_ids=torch.tensor([[1, 2, 3]]))
after_upstream = watched()
from modelgraft.models import build_model
model = build_model(config, architecture="Qwen3ForCausalLM")
with torch.no_grad():
    logits = model.eval()(input_ids=torch.tensor([[1, 2, 3]])).logits
print(json.dumps({{
    "after_import": after_import,
    "after_upstream": after_upstream,
    "after_model": watched(),
    "models": modelgraft.models.__file__,
    "generated": sys.modules[type(model).__module__].__file__,
    "logits": list(logits.shape),
    "finite": bool(torch.isfinite(logits).all()),
    "findable": sorted(m for m in WATCHED if importlib.util.find_spec(m) is not None),
    "distributions": sorted(d.metadata["Name"] for d in importlib.metadata.distributions()),
}}))
"""


@pytest.fixture(scope="module")
def wheel(built_once: Callable[[str, Callable[[Path], None]], Path]) -> Path:
    return find_wheel(built_once("wheel", build_wheel))


@pytest.fixture(scope="module")
def base_environment(wheel: Path, built_once: Callable[[str, Callable[[Path], None]], Path]) -> Path:
    return built_once("base-venv", install_with_base_requirements(wheel))


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("outside")
    (folder / "run_model.py").write_text(SCRIPT.format(watched=WATCHED), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def model_run(base_environment: Path, outside: Path) -> dict[str, Any]:
    output = run([str(base_environment / "bin" / "python"), "run_model.py"], cwd=outside)
    return {**json.loads(output), "site": str(base_environment)}


def test_the_base_requirements_name_no_tool(wheel: Path) -> None:
    names = sorted(Requirement(text).name.lower() for text in requires_dist(wheel) if "extra ==" not in text)
    assert names == sorted(r.name.lower() for r in base_requirements(wheel))
    assert {"torch", "transformers", "safetensors", "numpy"} <= set(names)
    assert sorted(set(names) & set(NOT_IN_THE_BASE)) == []


def test_the_tools_extra_names_the_tools_and_the_test_extra_pulls_it(wheel: Path) -> None:
    def extra(name: str) -> set[str]:
        marker = f'extra == "{name}"'
        return {Requirement(text).name.lower() for text in requires_dist(wheel) if marker in text}

    assert {"copier", "ruff", "jinja2", "pyyaml", "plumbum", "rich"} <= extra("tools")
    assert "ruff==" in next(text for text in requires_dist(wheel) if text.startswith("ruff"))
    assert "modelgraft" in extra("test")
    assert [sorted(Requirement(text).extras) for text in requires_dist(wheel) if text.startswith("modelgraft")] == [
        ["tools"]
    ]


def test_the_base_environment_holds_the_base_install_and_nothing_else(wheel: Path, model_run: dict[str, Any]) -> None:
    expected = sorted(d.metadata["Name"] for d in closure(base_requirements(wheel)).values())
    assert sorted(set(model_run["distributions"]) - {"modelgraft"}) == expected
    assert [m for m in NOT_INSTALLED if m in model_run["findable"]] == []


def test_the_base_install_builds_and_runs_a_generated_model(model_run: dict[str, Any]) -> None:
    assert (model_run["logits"], model_run["finite"]) == ([1, 3, 64], True)
    assert model_run["generated"].startswith(model_run["site"]), model_run["generated"]
    assert model_run["models"].startswith(model_run["site"]), model_run["models"]


def test_importing_the_models_imports_no_tool(model_run: dict[str, Any]) -> None:
    assert model_run["after_import"] == []


def test_building_and_running_a_model_imports_no_tool_that_upstream_does_not(model_run: dict[str, Any]) -> None:
    """transformers imports jinja2, rich and yaml where they are installed; the generated model adds none."""
    assert sorted(set(model_run["after_model"]) - set(model_run["after_upstream"])) == []
    assert [m for m in ("copier", "ruff", "plumbum", "pydantic") if m in model_run["after_model"]] == []


@pytest.mark.parametrize("script", ["patchgen", "generate-all", "scaffold-update", "scaffold-conflicts"])
def test_a_console_script_of_the_base_install_names_the_tools_extra(
    script: str, base_environment: Path, outside: Path
) -> None:
    result = subprocess.run(
        [str(base_environment / "bin" / script), "--help"], cwd=outside, capture_output=True, text=True, check=False
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{script}: error: copier, plumbum, ruff are not installed: {script} needs ")
    assert line.endswith("tools extra: pip install 'modelgraft[tools]' (in a checkout: pip install -e '.[tools]')")
