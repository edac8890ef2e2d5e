"""``patchgen-pin try`` in parts: the pin moved in a copy, every config generated against another version's
sources with every error and its owner, each model's tests read from pytest's report, and the migration report.

The whole trial (a throwaway environment pip fills from the registry, the zoo's tests in it) is what
docs/cli.md's worked example records; these tests run each part for real on small inputs.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from modelgraft.generator.errors import PatchgenError
from modelgraft.generator.pinbump.fetch import fetch_reference
from modelgraft.generator.pinbump.model_tests import TestOutcome, run_model_tests
from modelgraft.generator.pinbump.report import ModelReport, TrialReport, changed_regions, render_markdown
from modelgraft.generator.pinbump.scratch import move_pin, pinned_version
from modelgraft.generator.pinbump.survey import Finding
from modelgraft.generator.pinbump.trial_generate import generate_against

from .toy import local_pip

PYPROJECT = """[project]
dependencies = [
    "transformers==5.16.1",
    "torch>=2.4,<2.14",
]
"""
CONFIG = "zoopin.toy.toy_gpu_patch_gen_config"
GENERATED = "zoopin/toy/generated/patched_modeling_toy_gpu.py"


def test_move_pin_changes_the_transformers_pin_alone(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PYPROJECT)

    assert move_pin(pyproject, "5.25.0") == "5.16.1"
    assert pyproject.read_text() == PYPROJECT.replace("5.16.1", "5.25.0")


def test_a_pyproject_without_a_pin_is_an_error_naming_it(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[project]\ndependencies = []\n")

    with pytest.raises(PatchgenError, match="pins no transformers version"):
        pinned_version(pyproject)


def _reference(project: Path, wheelhouse: Path, version: str) -> Path:
    return fetch_reference(version, workspace=project / "ws", pip_args=local_pip(wheelhouse))


def test_a_config_generates_against_another_versions_sources_and_names_it(project: Path, wheelhouse: Path) -> None:
    results = generate_against(_reference(project, wheelhouse, "9.0.0"), "9.0.0")

    assert results[CONFIG] == {"file": GENERATED, "errors": []}
    assert "(transformers==9.0.0)" in (project / GENERATED).read_text()


def test_every_error_of_a_config_is_reported_with_its_owner(project: Path, wheelhouse: Path) -> None:
    results = generate_against(_reference(project, wheelhouse, "9.1.0"), "9.1.0")

    errors = results[CONFIG]["errors"]
    assert results[CONFIG]["file"] is None
    assert {e["target"] for e in errors} == {"ToyModel.forward", "helper"}, errors
    assert {e["type"] for e in errors} == {"SignatureMismatchError"}
    assert all(e["owner"].startswith("config zoopin/toy/toy_gpu_patch_gen_config.py:") for e in errors), errors
    assert not (project / GENERATED).exists()


def test_a_config_that_fails_to_load_is_reported_with_the_others(project: Path, wheelhouse: Path) -> None:
    broken = project / "zoopin" / "broken"
    broken.mkdir()
    (broken / "__init__.py").write_text("")
    (broken / "broken_gpu_patch_gen_config.py").write_text("raise ImportError('gone upstream')\n")

    results = generate_against(_reference(project, wheelhouse, "9.0.0"), "9.0.0")

    assert results[CONFIG]["file"] == GENERATED
    assert results["zoopin.broken.broken_gpu_patch_gen_config"]["errors"][0]["cause"].count("gone upstream") == 1


def _toy_checkout(root: Path) -> Path:
    tests = root / "models" / "toy" / "tests"
    tests.mkdir(parents=True)
    (tests / "test_toy.py").write_text(
        textwrap.dedent(
            """
            def test_passes():
                assert True

            def test_fails():
                assert 1 == 2, "upstream moved"
            """
        )
    )
    return root


def test_model_tests_are_counted_per_model_with_the_first_cause(tmp_path: Path) -> None:
    checkout = _toy_checkout(tmp_path / "checkout")

    outcomes, problem = run_model_tests(
        Path(sys.executable), checkout, ["toy"], tmp_path / "junit.xml", jobs=1, timeout=120
    )

    assert problem is None
    toy = outcomes["toy"]
    assert (toy.passed, toy.failed) == (1, 1)
    assert "test_fails" in toy.first_failure and "upstream moved" in toy.first_failure


DIFF_OLD = """--- a/x.py
+++ b/x.py
@@ -1,3 +1,3 @@
 class Kept:
-    a = 1
+    a = 2
@@ -10,3 +10,3 @@
 def moved():
-    return 1
+    return 2
"""


def test_changed_regions_name_hunks_whose_upstream_content_changed_not_those_that_only_moved() -> None:
    new = DIFF_OLD.replace("@@ -10,3 +10,3 @@", "@@ -14,3 +14,3 @@").replace(
        "class Kept:\n-    a = 1", "class Kept:\n-    a = 0"
    )
    assert changed_regions(DIFF_OLD, new) == ["Kept"]


def _report(*models: ModelReport) -> TrialReport:
    return TrialReport(old="5.16.1", new="5.25.0", models=list(models))


def test_a_report_passes_only_when_every_model_generates_and_passes_its_tests() -> None:
    good = ModelReport("llama", "models.llama.c", True, tests=TestOutcome(passed=3))
    failing = ModelReport("qwen3", "models.qwen3.c", True, tests=TestOutcome(passed=2, failed=1, first_failure="x"))
    broken = ModelReport("gemma3", "models.gemma3.c", False)

    assert _report(good).passes
    assert not _report(good, failing).passes
    assert not _report(good, broken).passes


def test_the_markdown_report_lists_every_model_and_the_owners_of_the_errors() -> None:
    error = {"type": "SignatureMismatchError", "target": "A.forward", "cause": "c", "owner": "snippet s.py.j2"}
    text = render_markdown(
        _report(
            ModelReport("llama", "models.llama.c", True, tests=TestOutcome(passed=3)),
            ModelReport("gemma3", "models.gemma3.c", False, errors=[error, dict(error, target="B.forward")]),
        )
    )

    assert "1 of 2 models generate and pass their tests" in text
    assert "| snippet s.py.j2 | 2 |" in text
    assert "| gemma3 | does not generate | - | 0 |" in text
    assert "`SignatureMismatchError` on `B.forward` (snippet s.py.j2): c" in text


def test_a_signature_change_is_absorbed_where_the_config_generates_and_breaking_where_it_does_not() -> None:
    change = Finding("models.llama.c", "LlamaModel.forward", "changed", "added cache", "snippet s.py.j2")
    text = render_markdown(
        _report(
            ModelReport("llama", "models.llama.c", True, tests=TestOutcome(failed=1), signature_changes=[change]),
            ModelReport("qwen3", "models.qwen3.c", False, signature_changes=[change]),
        )
    )

    llama, qwen3 = text.split("### llama")[1].split("### qwen3")
    assert "Signature changes (absorbed" in llama and "Signature changes (breaking" in qwen3
    assert "- changed `LlamaModel.forward` (snippet s.py.j2): added cache" in qwen3


def test_the_json_report_says_per_model_whether_it_passes(tmp_path: Path) -> None:
    from modelgraft.generator.pinbump.report import write_reports

    _, data = write_reports(_report(ModelReport("llama", "models.llama.c", False)), tmp_path)

    payload = json.loads(data.read_text())
    assert payload["passes"] is False
    assert payload["models"][0]["passes"] is False and payload["models"][0]["generated"] is False
