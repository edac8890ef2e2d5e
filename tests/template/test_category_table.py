"""The model categories are one table (generator/categories.py), and everything that branches on one reads it.

No condition of ``copier.yml`` and no part of ``template/`` (file names included) spells a category name: each
asks the table through the Jinja extension. A row added to the table is what the questionnaire's conditions,
the template's file names, the reader, the fit and ``scaffold-survey`` all see, with nothing else changed.
"""

from __future__ import annotations

import pytest
import yaml
from jinja2 import Environment, StrictUndefined, nodes

from modelgraft.generator import categories
from modelgraft.generator.categories import Category, Suite
from modelgraft.generator.recipes.fit import fit_model
from modelgraft.generator.upstream.reader import read_model
from modelgraft.scaffold.jinja_extension import ScaffoldExtension
from modelgraft.scaffold.survey import categories as survey_categories
from modelgraft.scaffold.survey import cli as survey_cli
from modelgraft.scaffold.survey import tables as survey_tables

from .repos import REPO_ROOT

QUESTIONS = yaml.safe_load((REPO_ROOT / "copier.yml").read_text(encoding="utf-8"))
TEMPLATE = REPO_ROOT / "template"

#: The questionnaire's conditions: question -> its ``when:`` (the constants of the templates, ``when: false``, aside).
CONDITIONS = {
    name: question["when"]
    for name, question in QUESTIONS.items()
    if isinstance(question, dict) and isinstance(question.get("when"), str)
}

#: A category the table does not hold: a text decoder with an audio tower alone, no experts (qwen2_audio's shape).
SPEECH = Category(
    "speech",
    recipe="omni",
    hybrid_recipe="",
    experts=False,
    towers=("audio",),
    text="dense",
    suite=Suite("scaffold_omni", "ScaffoldOmni", "ScaffoldOmniParitySuite", "the speech suite"),
    kind="speech, thinker only",
    label="speech",
)


def _environment() -> Environment:
    """A Jinja environment as Copier's for this template: the project's extension, strict variables."""
    return Environment(extensions=[ScaffoldExtension], undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _sources() -> dict[str, str]:
    """Every Jinja source the rendering branches in: the conditions, each file name and each file of template/."""
    sources = {f"copier.yml: {name}.when": when for name, when in CONDITIONS.items()}
    for path in sorted(TEMPLATE.rglob("*")):
        relative = path.relative_to(TEMPLATE).as_posix()
        sources[f"template file name {relative}"] = relative
        if path.is_file():
            sources[f"template/{relative}"] = path.read_text(encoding="utf-8")
    return sources


def _when(name: str, category: str) -> bool:
    return _environment().from_string(CONDITIONS[name]).render(category=category) == "True"


def _checkpoint_name(category: str, experts: object) -> str:
    """What the template's conditional checkpoint file name renders to (Copier's suffix ``.jinja`` aside)."""
    (name,) = [path.name for path in TEMPLATE.iterdir() if "checkpoint.py" in path.name]
    return (
        _environment().from_string(name.removesuffix(".jinja")).render(category=category, recipe={"experts": experts})
    )


def test_no_condition_or_template_file_spells_a_category_name() -> None:
    names = set(categories.category_names())
    environment = _environment()
    spelled = {}
    for where, source in _sources().items():
        constants = {node.value for node in environment.parse(source).find_all(nodes.Const)}
        if constants & names:
            spelled[where] = sorted(constants & names)
    assert spelled == {}, "name categories through the table's helpers (category | has_experts, ...)"
    assert len(CONDITIONS) >= 9


def test_the_questionnaires_choices_are_the_tables_categories() -> None:
    """Copier's choices are static (the survey reads them from copier.yml): they must be the table's names."""
    choices = QUESTIONS["category"]["choices"]
    assert list(choices.values()) == list(categories.category_names())


def test_the_conditions_follow_each_row() -> None:
    for row in categories.CATEGORIES:
        asked = {name for name in CONDITIONS if _when(name, row.name)}
        expected = set()
        if row.experts:
            expected |= {"num_experts_attr", "expert_intermediate_attr", "expert_projections", "hf_conversion"}
            expected |= {"hub_checkpoint"}
        if row.towers:
            expected |= {"processor", "image_processor", "image_processor_backend"}
        if row.vlm:
            expected |= {"separate_videos", "sub_model_types"} | ({"hub_transposed"} if row.experts else set())
        assert asked == expected, row.name
        assert _checkpoint_name(row.name, {"sparse_block": "X"}) == ("checkpoint.py" if row.experts else "")
        assert _checkpoint_name(row.name, None) == ""


@pytest.fixture
def with_speech(monkeypatch: pytest.MonkeyPatch) -> Category:
    """The table with one more row, :data:`SPEECH`, and nothing else changed."""
    monkeypatch.setattr(categories, "CATEGORIES", (*categories.CATEGORIES, SPEECH))
    return SPEECH


def test_a_new_row_is_what_the_questionnaire_and_the_file_names_see(with_speech: Category) -> None:
    assert {name for name in CONDITIONS if _when(name, "speech")} == {
        "processor",
        "image_processor",
        "image_processor_backend",
    }
    assert _checkpoint_name("speech", {"sparse_block": "X"}) == ""
    suite = _environment().from_string("{{ (category | parity_suite).title }}").render(category="speech")
    kind = _environment().from_string("{{ category | category_kind }}").render(category="speech")
    assert (suite, kind) == ("the speech suite", "speech, thinker only")


@pytest.mark.upstream_facts
def test_a_new_row_is_what_the_reader_and_the_fit_see(with_speech: Category) -> None:
    """qwen2_audio's audio tower alone picks the row with the fewest towers holding it; the fit takes the answer
    as a category (an Omni fit, as the row's towers say), and refuses a text model answered with it by name."""
    structure = read_model("qwen2_audio")
    assert structure.category == "speech" and structure.category_reason.startswith("an audio tower")
    fit = fit_model(structure)
    assert fit.category == "speech"
    assert all(finding.structure != "category" for finding in fit.refusals)
    assert any(finding.structure == "omni" for finding in fit.refusals)  # the omni fit ran: not Qwen-Omni-like

    refused = fit_model(read_model("mistral"), "speech")
    assert refused.refusals[0].reason.startswith("answered speech, but upstream's structure is dense")


def test_a_new_row_is_what_the_survey_sees(with_speech: Category) -> None:
    assert "speech" in survey_categories.category_names()
    assert "speech" in survey_categories.multimodal_categories()
    choices = next(a.choices for a in survey_cli.build_parser()._actions if "--category" in a.option_strings)
    assert "speech" in choices
    assert survey_tables.category_order(["speech", "unknown", "dense"]) == ["dense", "speech", "unknown"]
    assert (
        survey_categories.category_label("speech") == "speech" and survey_categories.category_target("speech") is None
    )


def test_every_scaffolds_suite_exists_in_models_testing() -> None:
    import importlib

    for row in categories.CATEGORIES:
        if row.suite is None:
            assert not row.scaffolded, row.name
            continue
        module = importlib.import_module(f"modelgraft.models.testing.{row.suite.module}")
        assert hasattr(module, row.suite.model) and hasattr(module, row.suite.suite), row.name


def test_every_recipe_of_the_table_is_exported() -> None:
    from modelgraft.generator import recipes

    for row in categories.CATEGORIES:
        for recipe in filter(None, (row.recipe, row.hybrid_recipe)):
            assert recipe in recipes.__all__, (row.name, recipe)


def test_the_reader_picks_the_row_of_the_towers_and_experts_it_finds() -> None:
    pick = categories.category_for
    assert [pick(experts=e, towers=t).name for e in (False, True) for t in ((), ("vision",), ("audio",))] == [
        "dense", "vlm", "omni", "moe", "vlm_moe", "omni_moe",
    ]  # fmt: skip
    assert pick(experts=False, towers=("audio", "vision")).name == "omni"
