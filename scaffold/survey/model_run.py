"""One model through the survey: ``copier copy`` as a new user runs it, then the model's own tests."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from modelgraft.scaffold.survey.classify import (
    ModelResult,
    Observation,
    TextAnswerResult,
    classify,
    guarded_slots,
    merged_slots,
    strip_ansi,
    template_version,
    text_answer_of,
)
from modelgraft.scaffold.survey.clones import changed_paths, reset_clone, subprocess_env
from modelgraft.scaffold.survey.processes import Runner
from modelgraft.scaffold.survey.sub_models import sub_model_modules


@dataclass(frozen=True)
class Settings:
    """How each model is surveyed: the time it may take, Copier's ref, the category answer, torch threads."""

    timeout: float = 600.0
    vcs_ref: str | None = None
    pass_category: bool = False
    threads: int | None = None


def copier_command() -> list[str]:
    """The ``copier`` script beside this interpreter, else ``python -m copier``."""
    script = Path(sys.executable).parent / ("copier.exe" if os.name == "nt" else "copier")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "copier"]


def copier_categories(clone: Path) -> tuple[str, ...]:
    """The values of the questionnaire's ``category`` choices (copier.yml of the clone)."""
    import yaml

    try:
        questions = yaml.safe_load((clone / "copier.yml").read_text(encoding="utf-8")) or {}
        choices = questions.get("category", {}).get("choices", {})
    except (OSError, yaml.YAMLError, AttributeError):
        return ()
    if isinstance(choices, list):
        return tuple(str(choice) for choice in choices)
    values = []
    for value in choices.values() if isinstance(choices, dict) else ():
        values.append(str(value.get("value") if isinstance(value, dict) else value))
    return tuple(values)


def survey_model(clone: Path, model: str, category: str, runner: Runner, settings: Settings) -> Observation:
    """Copy ``model`` into ``clone`` as a new user would, run its tests; what happened (the clone is reset).

    A refusal that names the category answer scaffolding the package's text model alone (llama4's
    ``-d category=moe``) is followed as a user would follow it: that copy is made too (``Observation.text``).
    """
    answer = category if settings.pass_category and category in copier_categories(clone) else None
    observation = _copy_and_test(clone, model, answer, runner, settings)
    text = text_answer_of(observation.copy.output) if observation.copy.returncode != 0 else None
    if text is None or observation.dest_exists or runner.stopped.is_set():
        return observation
    return replace(observation, text=(text, _copy_and_test(clone, model, text, runner, settings)))


def _copy_and_test(clone: Path, model: str, answer: str | None, runner: Runner, settings: Settings) -> Observation:
    """One ``copier copy`` (with ``-d category=<answer>`` when given) and, where it wrote the package, its tests."""
    env = subprocess_env(clone, settings.threads)
    argv = [*copier_command(), "copy", "--trust", "--defaults", "-d", f"model={model}"]
    if answer is not None:
        argv += ["-d", f"category={answer}"]
    if settings.vcs_ref:
        argv += ["--vcs-ref", settings.vcs_ref]
    argv += [".", f"models/{model}"]
    start = time.monotonic()
    dest = clone / "models" / model
    try:
        copy = runner.run(argv, clone, env, settings.timeout)
        dest_exists = dest.exists()
        stray = tuple(
            p for p in changed_paths(clone) if not p.startswith(f"models/{model}/") and p != f"models/{model}"
        )
        tests = None
        if copy.returncode == 0 and dest_exists and not stray:
            left = settings.timeout - (time.monotonic() - start)
            pytest_args = [f"models/{model}", "-q", "-x", "-p", "no:cacheprovider"]
            # A base folder of its own: pytest sessions sharing the default root race in removing its
            # pytest-current link at their end, and the loser exits 1 after its tests passed.
            with tempfile.TemporaryDirectory(prefix=f"survey-{model}-") as private:
                pytest_args += ["--basetemp", str(Path(private) / "tmp")]
                tests = runner.run_module("pytest", pytest_args, clone, env, left)
        generated = dest / "generated" / f"patched_modeling_{model}_gpu.py"
        slots = guarded_slots(generated.read_text(encoding="utf-8")) if generated.is_file() else ()
        for module in sub_model_modules(dest, clone / "models"):  # a composed copy's towers guard the rest
            slots = merged_slots(slots, guarded_slots(module.read_text(encoding="utf-8")))
    finally:
        reset_clone(clone, model)
    return Observation(model, copy, dest_exists, stray, tests, settings.timeout, slots)


def result_of(observation: Observation, category: tuple[str, str], seconds: float) -> ModelResult:
    """The classified result of one model, with the tails of its processes' output for the JSON report."""
    verdict = classify(observation)
    details = {
        "copy": {"returncode": observation.copy.returncode, "seconds": round(observation.copy.seconds, 2),
                 "timed_out": observation.copy.timed_out, "output_tail": strip_ansi(observation.copy.output)[-4000:]},
    }  # fmt: skip
    if observation.tests is not None:
        details["tests"] = {
            "returncode": observation.tests.returncode,
            "seconds": round(observation.tests.seconds, 2),
            "timed_out": observation.tests.timed_out,
            "output_tail": strip_ansi(observation.tests.output)[-4000:],
        }
    if observation.stray:
        details["stray"] = list(observation.stray)
    text_answer = None
    if observation.text is not None:
        answer, text = observation.text
        text_verdict = classify(text)
        text_answer = TextAnswerResult(answer, text_verdict.outcome, text_verdict.reason, text.slots)
    return ModelResult(
        model=observation.model,
        category=category[0],
        category_reason=category[1],
        outcome=verdict.outcome,
        reason=verdict.reason,
        slots=observation.slots,
        seconds=round(seconds, 2),
        template_version=template_version(observation.copy.output),
        details=details,
        text_answer=text_answer,
    )
