"""The survey follows a refusal that names the text answer for the package's causal LM alone, as a user would:
a second copy with that category, reported beside the refusal and left out of the counts."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from modelgraft.generator.entrypoint import ExitStatus
from modelgraft.generator.recipes.fit import fit_model
from modelgraft.generator.upstream.reader import read_model
from modelgraft.scaffold.survey.classify import (
    PASS,
    REFUSED,
    WRONG,
    ModelResult,
    StepResult,
    TextAnswerResult,
    text_answer_of,
)
from modelgraft.scaffold.survey.model_run import Settings, result_of, survey_model
from modelgraft.scaffold.survey.tables import exit_code, markdown_tables, summarize

#: The last line of a refusal the fit writes for such a package (its wording is the fit's, checked below).
HINT = "Its causal LM ToyForCausalLM builds no tower: -d category=moe scaffolds that text model alone (docs/...)."
REFUSAL = f"no scaffold for toy: upstream has structures no snippet handles\n  - vlm: ToyModel: no projector\n{HINT}\n"
GENERATED = "def f(x):\n    if rms_norm_slot.use_non_eager_impl:\n        return rms_norm_slot(x)\n    return x\n"


class FakeRunner:
    """The first copy refuses with the hint; the one answering moe writes the package, whose tests pass."""

    def __init__(self, clone: Path, refusal: str = REFUSAL) -> None:
        self.clone, self.refusal = clone, refusal
        self.copies: list[tuple[str, ...]] = []
        self.stopped = _Unset()

    def run(self, argv: Sequence[str], cwd: Path, env: dict[str, str], timeout: float) -> StepResult:
        self.copies.append(tuple(argv))
        if "category=moe" not in argv:
            return StepResult(tuple(argv), 1, self.refusal)
        generated = self.clone / "models" / "toy" / "generated" / "patched_modeling_toy_gpu.py"
        generated.parent.mkdir(parents=True)
        generated.write_text(GENERATED, encoding="utf-8")
        return StepResult(tuple(argv), 0, "models/toy/ is ready")

    def run_module(self, module: str, args: Sequence[str], cwd: Path, env: dict, timeout: float) -> StepResult:
        return StepResult((module, *args), 0, "3 passed in 1.00s")


class _Unset:
    def is_set(self) -> bool:
        return False


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A git repository with a models/ folder and build/ ignored, standing for the survey's clone."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / ".gitignore").write_text("build/\n", encoding="utf-8")
    for command in (
        ["init", "-q"],
        ["add", "--all"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start"],
    ):
        subprocess.run(["git", *command], cwd=tmp_path, check=True)
    return tmp_path


@pytest.mark.upstream_facts
def test_the_survey_reads_the_answer_from_the_fits_own_refusal() -> None:
    """llama4's refusal in transformers 5.25.0 ends with the moe answer for Llama4ForCausalLM."""
    assert text_answer_of(fit_model(read_model("llama4")).refusal_message()) == "moe"


def test_a_refusal_without_the_line_names_no_answer() -> None:
    assert text_answer_of("no scaffold for toy: upstream has structures no snippet handles\n  - vlm: ...\n") is None


def test_a_refusal_naming_a_text_answer_is_followed_with_that_category(clone: Path) -> None:
    runner = FakeRunner(clone)
    observation = survey_model(clone, "toy", "vlm", runner, Settings())

    assert len(runner.copies) == 2 and "category=moe" in runner.copies[1]
    assert observation.text is not None and observation.text[0] == "moe"
    assert not (clone / "models" / "toy").exists()  # the clone is reset after each copy


def test_the_text_answers_outcome_is_reported_beside_the_refusal_and_not_counted(clone: Path) -> None:
    result = result_of(survey_model(clone, "toy", "vlm", FakeRunner(clone), Settings()), ("vlm", "read"), 1.0)

    assert result.outcome == REFUSED
    answer = result.text_answer
    assert isinstance(answer, TextAnswerResult)
    assert (answer.category, answer.outcome, answer.slots) == ("moe", PASS, ("rms_norm",))
    assert "; -d category=moe: pass (rms_norm) |" in markdown_tables([result])
    assert summarize([result])[0][PASS] == 0


def test_a_refusal_without_a_text_answer_is_copied_once(clone: Path) -> None:
    runner = FakeRunner(clone, refusal="no scaffold for toy: upstream has structures no snippet handles\n")
    observation = survey_model(clone, "toy", "vlm", runner, Settings())

    assert len(runner.copies) == 1 and observation.text is None


def test_a_wrong_copy_with_the_text_answer_fails_the_survey() -> None:
    """A user following the refusal would get a wrong model: the survey exits 1 although the row is refused."""
    result = ModelResult("toy", "vlm", outcome=REFUSED, text_answer=TextAnswerResult("moe", WRONG, "a test failed"))
    assert exit_code([result]) == ExitStatus.FINDINGS
