"""One real model through scaffold-survey: a worktree clone, copier copy, the generator, the model's own tests.

The model is the first dense model outside the zoo that the scaffold supports as it is (mistral, unless a user
added it to the zoo). The whole run takes about 15 to 25 s on two cores (cloning the working tree: ~1 s; the
reader: ~1 s; the copy and generation: ~1 s; the model's parity tests: 10 to 20 s), so it runs in the normal suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from modelgraft.scaffold.survey.population import zoo_models

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Dense upstream models the scaffold passes as they are, in order of preference (the template tests' own list,
#: tests/template/repos.py, holds more): the survey takes the first one outside the zoo.
DENSE = ("mistral", "smollm3", "olmo2", "ministral")


@pytest.fixture
def model() -> str:
    free = [model for model in DENSE if model not in zoo_models(REPO_ROOT)]
    assert free, f"every one of {DENSE} is in the zoo: add another dense model the scaffold passes"
    return free[0]


@pytest.mark.heavy
def test_survey_of_a_dense_model_outside_the_zoo_passes_and_lists_its_slots(tmp_path: Path, model: str) -> None:
    report = tmp_path / "survey.json"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTEST_ADDOPTS"}}
    env["TMPDIR"] = str(tmp_path)  # the survey's clones go here, and must be gone afterwards
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "modelgraft.scaffold.survey",
            model,
            "-j",
            "1",
            "--timeout",
            "300",
            "--json",
            str(report),
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr

    payload = json.loads(report.read_text(encoding="utf-8"))
    (result,) = payload["results"]
    assert (result["model"], result["outcome"], result["reason"]) == (model, "pass", ""), result["details"]
    assert {"rms_norm", "rope", "causal_lm_loss"} <= set(result["slots"])
    assert result["details"]["tests"]["returncode"] == 0
    assert payload["from_worktree"] is True and payload["source"] == str(REPO_ROOT)
    if payload["reader"] is not None:  # the clone's reader, not this checkout's
        assert payload["reader"].startswith(str(tmp_path)) and result["category"] == "dense"
    total = payload["summary"][-1]
    assert (total["category"], total["models"], total["pass"]) == ("total", 1, 1)

    # stderr: one plain line per model (no terminal here); stdout: the summary table.
    assert f"[1/1] {model} (" in run.stderr, run.stderr
    assert run.stdout.splitlines()[0].split()[:2] == ["category", "models"]
    assert not list(tmp_path.glob("scaffold-survey-*")), "the temporary clone was not removed"
