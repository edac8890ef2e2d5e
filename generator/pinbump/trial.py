"""``patchgen-pin try`` and ``bump``: what moving the transformers pin to another version would do, measured.

A trial works on a scratch copy of the project in the git-ignored workspace (``scratch.py``): the project's
files and its environment stay as they were. In order:

1. the sources of the version are fetched from its wheel (``fetch.py``);
2. every config of the copy is generated against them, with this environment and the copy's code, going
   on past every failure (``trial_generate.py``), and what generates is written into the copy;
3. the signature of every patch target is compared between the pinned and the new version (``survey.py``);
4. a throwaway environment with the new version installed runs the tests of every model that generated
   (``scratch.make_environment``, ``model_tests.py``);
5. the migration report is written, markdown and JSON (``report.py``).

``bump`` runs the same trial and then moves the pin and the regenerated files into the project, only when
every model passed (or, asked to keep a partial bump, whatever generated).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from modelgraft.generator.discovery import discover, find_settings, load_config
from modelgraft.generator.drift import read_text
from modelgraft.generator.errors import PatchgenError
from modelgraft.generator.pinbump.fetch import fetch_reference
from modelgraft.generator.pinbump.model_tests import run_model_tests
from modelgraft.generator.pinbump.report import ModelReport, TrialReport, changed_regions, write_reports
from modelgraft.generator.pinbump.scratch import make_environment, move_pin, pinned_version, scratch_copy
from modelgraft.generator.pinbump.survey import survey
from modelgraft.generator.upstream.locate import package_root
from modelgraft.scaffold.survey.clones import subprocess_env


@dataclass(frozen=True)
class TrialSettings:
    """How a trial runs: where it works and reports, pip's extra arguments, test workers and time limit."""

    workspace: Path
    report_dir: Path
    pip_args: tuple[str, ...] = ()
    jobs: int = 2
    timeout: float = 900.0


@dataclass
class Trial:
    """A finished trial: its report, and the scratch copy (removed at the end unless kept)."""

    report: TrialReport
    scratch: Path
    generated: dict[str, str | None]


def _generate(scratch: Path, reference: Path, version: str, out: Path) -> dict[str, dict]:
    """Every config of the copy against ``reference`` (``trial_generate``, run in the copy)."""
    command = [
        sys.executable, "-m", "modelgraft.generator.pinbump.trial_generate",
        "--reference", str(reference), "--version", version, "--out", str(out),
    ]  # fmt: skip
    result = subprocess.run(command, cwd=scratch, env=subprocess_env(scratch), capture_output=True, text=True)
    if result.returncode != 0 or not out.is_file():
        said = "\n".join((result.stderr or result.stdout).strip().splitlines()[-8:])
        raise PatchgenError(f"generating the scratch copy against transformers {version} failed:\n{said}")
    return json.loads(out.read_text(encoding="utf-8"))


def _model_of(config: str) -> str:
    """``models.qwen3.qwen3_gpu_patch_gen_config`` -> ``qwen3``: the package that holds the config."""
    parts = config.split(".")
    return parts[-2] if len(parts) > 1 else config


def run_trial(version: str, settings: TrialSettings) -> Trial:
    """Try ``version`` on a scratch copy of the project found from the current directory; see the module doc."""
    started = time.perf_counter()
    project = find_settings()
    old = pinned_version(project.root / "pyproject.toml")
    reference = fetch_reference(version, workspace=settings.workspace, pip_args=settings.pip_args)
    settings.workspace.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix=f"try-{version}-", dir=settings.workspace))
    scratch = scratch_copy(project.root, base / "project")
    move_pin(scratch / "pyproject.toml", version)

    results = _generate(scratch, reference, version, base / "generated.json")
    loaded = {name: load_config(name, project) for name in discover(project)}
    findings = survey(list(loaded.values()), package_root("transformers").parent, reference, project.root)
    models = []
    for config, result in results.items():
        model = ModelReport(model=_model_of(config), config=config, generated=result["file"] is not None)
        model.errors = result["errors"]
        model.signature_changes = [f for f in findings if f.config == config and f.status != "unchanged"]
        if model.generated and config in loaded:
            diff = loaded[config].diff_path.relative_to(project.root)
            model.changed_regions = changed_regions(read_text(project.root / diff), read_text(scratch / diff))
        models.append(model)

    report = TrialReport(old=old, new=version, models=models)
    try:
        python = make_environment(scratch, base / "venv", settings.pip_args)
    except PatchgenError as error:
        report.problems.append(str(error))
    else:
        tested = sorted({model.model for model in models if model.generated})
        outcomes, problem = run_model_tests(
            python, scratch, tested, base / "junit.xml", jobs=settings.jobs, timeout=settings.timeout
        )
        if problem:
            report.problems.append(problem)
        for model in models:
            if model.generated:
                model.tests = outcomes.get(model.model)
    report.seconds = time.perf_counter() - started
    write_reports(report, settings.report_dir)
    shutil.rmtree(base / "venv", ignore_errors=True)  # hundreds of MB; the scratch copy is small
    return Trial(report=report, scratch=scratch, generated={c: r["file"] for c, r in results.items()})


def apply_bump(trial: Trial, root: Path) -> list[Path]:
    """Move the pin and every file the trial generated (with its ``.diff``) from the scratch copy into ``root``."""
    moved = []
    for file in (f for f in trial.generated.values() if f is not None):
        for relative in (Path(file), Path(file).with_suffix(".diff")):
            source = trial.scratch / relative
            if source.is_file():
                (root / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, root / relative)
                moved.append(root / relative)
    move_pin(root / "pyproject.toml", trial.report.new)
    return moved
