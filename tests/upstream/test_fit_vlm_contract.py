"""A VLM's refusal names the Qwen-VL contract: that the model fits it, or each way it differs."""

from __future__ import annotations

from functools import cache

from modelgraft.generator.recipes.fit import Fit, fit_model
from modelgraft.generator.upstream.reader import read_model


@cache
def fit(model: str) -> Fit:
    return fit_model(read_model(model))


def contract(model: str) -> list[str]:
    return [f.describe() for f in fit(model).refusals if f.structure == "qwen-vl contract"]


def test_a_vlm_that_fits_says_so_and_names_the_vlm_recipe() -> None:
    (finding,) = contract("glm4v")
    assert "Glm4vModel (line " in finding and "fits the Qwen-VL contract" in finding
    assert "generator/recipes/vlm.py" in finding


def test_a_vlm_that_differs_lists_each_difference() -> None:
    findings = contract("llava")
    assert len(findings) == 3
    assert all(": differs: " in f for f in findings)
    assert "self.vision_tower, not self.visual" in findings[0]


def test_the_contract_follows_the_category_finding_in_the_message() -> None:
    message = fit("llava").refusal_message().splitlines()
    assert "vlm models have no scaffold yet" in message[1]
    assert "qwen-vl contract: LlavaModel" in message[2]


def test_a_text_model_gets_no_contract_finding() -> None:
    assert contract("qwen3") == [] and contract("bloom") == []


def test_a_vlm_answered_as_its_text_category_gets_no_contract_finding() -> None:
    """gemma3's causal LM is a text model of its own: answered dense, it is fitted as dense."""
    gemma3 = fit_model(read_model("gemma3"), "dense")
    assert not [f for f in gemma3.refusals if f.structure == "qwen-vl contract"]
