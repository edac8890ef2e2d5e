"""Run each model's own tests in the trial environment and read what happened from pytest's JUnit XML.

One pytest run covers every model that generated (xdist spreads them over the cores); each test case is
filed under the model whose ``models/<m>/tests/`` holds it, with the first line of the first failure, so
the report says per model how many passed and why the first one failed.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class TestOutcome:
    """One model's tests: counts, and the first failing test with the first line of its cause."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    first_failure: str | None = None
    failures: list[str] = field(default_factory=list)


def _model_of(case: ET.Element) -> str | None:
    """``models/<m>/tests/...`` -> ``<m>`` from the test case's file or dotted class name."""
    where = case.get("file") or (case.get("classname") or "").replace(".", "/")
    parts = where.split("/")
    if "models" in parts:
        index = parts.index("models")
        if index + 1 < len(parts):
            return parts[index + 1]
    return None


def _cause(problem: ET.Element) -> str:
    text = (problem.get("message") or problem.text or "").strip()
    return text.splitlines()[0][:300] if text else "(no message)"


def read_junit(xml: Path) -> dict[str, TestOutcome]:
    """Model -> its :class:`TestOutcome`, from one JUnit XML report."""
    outcomes: dict[str, TestOutcome] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        model = _model_of(case)
        if model is None:
            continue
        outcome = outcomes.setdefault(model, TestOutcome())
        problem = next((child for child in case if child.tag in ("failure", "error")), None)
        if problem is not None:
            outcome.failed += 1
            name = f"{case.get('classname')}::{case.get('name')}"
            outcome.failures.append(name)
            if outcome.first_failure is None:
                outcome.first_failure = f"{name}: {_cause(problem)}"
        elif any(child.tag == "skipped" for child in case):
            outcome.skipped += 1
        else:
            outcome.passed += 1
    return outcomes


def run_model_tests(
    python: Path, checkout: Path, models: list[str], xml: Path, *, jobs: int, timeout: float
) -> tuple[dict[str, TestOutcome], str | None]:
    """Run ``models/<m>/tests`` of ``models`` with ``python`` in ``checkout``; outcomes, and why the run
    itself failed (no report: a collection error, a timeout), else None."""
    if not models:
        return {}, None
    paths = [f"models/{model}/tests" for model in models if (checkout / "models" / model / "tests").is_dir()]
    command = [
        str(python), "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider", "-o", "addopts=",
        f"--junitxml={xml}", "-o", "junit_family=xunit2",
        # A base folder of its own: sessions sharing pytest's default root race in removing its pytest-current
        # link at their end, and the loser exits 1 after its tests passed.
        "--basetemp", str(xml.with_name(xml.stem + "-tmp")),
    ]  # fmt: skip
    if jobs > 1:
        command += ["-n", str(jobs)]
    try:
        result = subprocess.run(command, cwd=checkout, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return (read_junit(xml) if xml.is_file() else {}), f"the model tests ran past {timeout:.0f} s"
    if not xml.is_file():
        return {}, "pytest wrote no report: " + "\n".join((result.stdout + result.stderr).strip().splitlines()[-5:])
    return read_junit(xml), None
