"""Tests that assert facts of the pinned transformers are marked, and their failures are listed apart.

After a pin bump those tests are expected to move with upstream; the marker (``upstream_facts``) lets a
maintainer run them apart (``-m upstream_facts`` / ``-m "not upstream_facts"``) and the run's summary lists
their failures in a section of their own, so real breakage shows at a glance.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in ``folder`` with the repository's root conftest as a plugin (its hooks, its markers)."""
    (folder / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    upstream_facts: facts of the pinned transformers\n", encoding="utf-8"
    )
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "conftest", "-q", *args]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, env=env, check=False)


def test_failures_of_upstream_facts_are_listed_apart_from_the_others(tmp_path: Path) -> None:
    (tmp_path / "test_both.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.upstream_facts
            def test_a_fact_of_the_pin():
                assert "past_key_values" == "cache"

            def test_a_behaviour():
                assert 1 == 2
            """
        ),
        encoding="utf-8",
    )

    out = _run(tmp_path).stdout

    section = out.split("1 failed test(s) assert facts of the pinned transformers", 1)[1]
    assert "test_both.py::test_a_fact_of_the_pin" in section
    assert "test_a_behaviour" not in section.split("other failure(s)")[0]
    assert "1 other failure(s) are behaviour" in section


def test_a_run_without_failing_facts_has_no_such_section(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_a_behaviour():\n    assert 1 == 2\n", encoding="utf-8")

    assert "facts of the pinned transformers" not in _run(tmp_path).stdout


def test_a_collection_error_is_reported_as_pytest_reports_it(tmp_path: Path) -> None:
    (tmp_path / "test_broken.py").write_text("import a_module_that_does_not_exist\n", encoding="utf-8")

    result = _run(tmp_path)

    assert "ERROR test_broken.py" in result.stdout
    assert "INTERNALERROR" not in result.stdout + result.stderr


def test_the_reader_tests_of_named_upstream_models_are_marked_and_the_toy_ones_are_not() -> None:
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--co",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not upstream_facts",
            "tests/upstream",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    files = {line.split("::")[0] for line in listed.splitlines() if "::" in line}
    assert files == {
        "tests/upstream/test_model_source_calls.py",
        "tests/upstream/test_read_calls_toys.py",
        "tests/upstream/test_read_category_toys.py",
        "tests/upstream/test_read_linear_attention_reach.py",
        "tests/upstream/test_read_vlm_toys.py",
        "tests/upstream/test_survey.py",
    }, files
