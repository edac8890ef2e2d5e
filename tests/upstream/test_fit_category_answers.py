"""The fit checks a category answer against upstream's structure, and a refusal says how to go on.

One pinned model per category the reader detects; every other category answered for it is refused with
what was detected. A refusal names the patches a hand-written config would apply, or says none can be.
"""

from __future__ import annotations

from functools import cache

import pytest

from modelgraft.generator.categories import category_names
from modelgraft.generator.recipes.causal_lm_path import text_model_classes, towers_on_causal_lm_path
from modelgraft.generator.recipes.fit import Fit, fit_model
from modelgraft.generator.upstream.structure import ModelStructure

from .readings import read_model

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts

#: A pinned model of each category, as the reader detects it.
EXAMPLE = {
    "dense": "mistral",
    "moe": "qwen2_moe",
    "vlm": "qwen3_vl",
    "vlm_moe": "qwen3_vl_moe",
    "omni": "qwen2_5_omni",
    "omni_moe": "qwen3_omni_moe",
    "out_of_category": "mamba",
}
CONTRADICTIONS = [
    (detected, answered) for detected in EXAMPLE for answered in category_names() if answered != detected
]


@cache
def structure(model: str) -> ModelStructure:
    return read_model(model)


def fit(model: str, category: str | None = None) -> Fit:
    return fit_model(structure(model), category)


def test_every_category_has_an_example_the_reader_puts_in_it() -> None:
    assert set(EXAMPLE) == set(category_names())
    assert {category: structure(model).category for category, model in EXAMPLE.items()} == {c: c for c in EXAMPLE}


@pytest.mark.parametrize(("detected", "answered"), CONTRADICTIONS, ids=[f"{d}-as-{a}" for d, a in CONTRADICTIONS])
def test_an_answer_that_contradicts_the_detected_category_is_refused_naming_it(detected: str, answered: str) -> None:
    model = EXAMPLE[detected]
    refused = fit(model, answered)

    assert refused.refused and refused.arguments == {} and refused.guarded == ()
    first = refused.refusals[0]
    assert first.structure == "category answer"
    assert f"answered {answered}, but upstream's structure is {detected}: " in first.reason
    assert structure(model).category_reason in first.reason


def test_a_vlm_answered_dense_is_refused_although_its_text_model_would_fit() -> None:
    message = fit("qwen3_vl", "dense").refusal_message()

    assert "answered dense, but upstream's structure is vlm: a vision tower (Qwen3VLVisionMLP)" in message
    assert message.endswith("Answer the detected category, vlm: the default (drop -d category=dense).")


def test_the_refusal_names_the_tower_the_causal_lm_builds() -> None:
    reason = fit("qwen3_vl", "dense").refusals[0].reason

    assert reason.endswith("; its causal LM Qwen3VLForConditionalGeneration builds Qwen3VLModel.visual")


def test_an_omni_thinker_builds_its_audio_and_vision_towers_from_their_configs() -> None:
    assert towers_on_causal_lm_path(structure("qwen2_5_omni")) == (
        "Qwen2_5OmniThinkerModel.audio_tower",
        "Qwen2_5OmniThinkerModel.visual",
    )


def test_a_package_with_a_tower_whose_causal_lm_is_a_text_model_fits_its_text_category() -> None:
    """gemma3's Gemma3ForCausalLM builds Gemma3TextModel, no tower: the zoo scaffolds it as dense."""
    assert structure("gemma3").category == "vlm" and towers_on_causal_lm_path(structure("gemma3")) == ()

    assert not fit("gemma3", "dense").refused
    assert fit("gemma3", "moe").refusals[0].reason.endswith("; upstream has no routed experts")


def test_a_refused_vlm_whose_causal_lm_builds_no_tower_names_the_text_answer_that_fits() -> None:
    """llama4's VLM is refused; its Llama4ForCausalLM is a MoE text model of its own, which the message offers."""
    refused = fit("llama4")

    assert refused.refused and refused.text_answer == ("Llama4ForCausalLM", "moe")
    assert refused.refusal_message().endswith(
        "Its causal LM Llama4ForCausalLM builds no tower: -d category=moe scaffolds that text model alone "
        '(docs/scaffolding.md, "Overriding a decision").'
    )


def test_a_refused_vlm_whose_causal_lm_builds_its_tower_offers_no_text_answer() -> None:
    """lfm2_vl's only causal LM is the conditional-generation head over both towers."""
    refused = fit("lfm2_vl")

    assert refused.refused and refused.text_answer == ()
    assert "builds no tower" not in refused.refusal_message()


def test_a_vlm_that_fits_offers_no_text_answer() -> None:
    assert fit("gemma3").text_answer == ()


def test_a_text_answer_guards_only_what_the_causal_lm_builds() -> None:
    """llama4's vision encoder layers call nn.LayerNorm; Llama4ForCausalLM never builds them, so no layer_norm
    guard, whose smoke check would find the bound kernel never called."""
    text = fit("llama4", "moe")

    assert not text.refused and "layer_norm" not in text.guarded
    assert all(not site["cls"].startswith("Llama4Vision") for site in text.arguments["call_sites"])


def test_layers_built_in_a_loop_of_the_text_models_init_are_on_its_path() -> None:
    """mllama's text model appends its cross-attention and self-attention layers in a loop: the walk reads the
    whole ``__init__``, so the vision MLP's activation is no guard of the text answer."""
    assert fit("mllama").text_answer == ("MllamaForCausalLM", "dense")
    assert "activation" not in fit("mllama", "dense").guarded


def test_a_walk_that_misses_the_decoder_layer_leaves_the_structure_whole() -> None:
    """kosmos2_5's text causal LM builds its transformer in a way the walk does not follow: no text-only reading."""
    assert text_model_classes(structure("kosmos2_5")) is None


def test_a_causal_lm_outside_upstreams_public_api_is_offered_no_text_answer() -> None:
    """kosmos2's Kosmos2TextForCausalLM is not in its module's __all__: transformers does not export it."""
    assert fit("kosmos2").text_answer == ()


def test_a_decoder_layer_holding_its_experts_itself_has_no_sparse_block_attribute() -> None:
    """gemma4's experts are model.layers.<i>.experts: the expert-parallel plan names them on the layer."""
    assert structure("gemma4").moe.block_attr == ""
    assert fit("gemma4", "moe").arguments["experts"]["block_attr"] == ""


def test_dense_answered_for_routed_experts_names_the_sparse_block() -> None:
    reason = fit("qwen2_moe", "dense").refusals[0].reason

    assert "upstream routes to experts in Qwen2MoeSparseMoeBlock (line " in reason


def test_moe_answered_without_routed_experts_says_there_are_none() -> None:
    assert fit("mistral", "moe").refusals[0].reason.endswith("; upstream has no routed experts")


def test_the_detected_category_is_the_default_and_fits() -> None:
    assert not fit("mistral").refused and not fit("mistral", "dense").refused
    assert not fit("qwen2_moe", "moe").refused


def test_a_wrong_answer_for_a_model_that_fits_says_to_take_the_default() -> None:
    message = fit("qwen2_moe", "dense").refusal_message()

    assert message.splitlines()[0] == "no dense scaffold for qwen2_moe: the category answer contradicts upstream"
    assert message.splitlines()[-1] == "Answer the detected category, moe: the default (drop -d category=dense)."
    assert "by hand" not in message


def test_a_refusal_names_the_patches_a_hand_written_config_would_apply() -> None:
    message = fit("gemma4").refusal_message()  # omni_moe, but not Qwen-Omni-like

    assert "Write the config by hand (docs/adding-a-model.md#hand-written-patches); it would apply:" in message
    assert "  - Gemma4TextMLP.forward: glu_mlp_guard (layout=gated), behind the glu_activation slot" in message
    assert "  - Gemma4TextDecoderLayer.forward: moe_experts_guard, behind the moe_experts slot" in message
    assert "  - Gemma4ForCausalLM.forward: causal_lm_loss_guard, behind the causal_lm_loss slot" in message


def test_a_wrong_answer_for_a_refused_model_still_names_the_patches() -> None:
    assert fit("gemma4", "dense").hand_patches == fit("gemma4").hand_patches != ()


def test_an_out_of_category_model_says_no_patch_can_be_named() -> None:
    last = fit("mamba").refusal_message().splitlines()[-1]

    assert last.startswith("No patch can be named for a hand-written config: the snippets cover decoder-only text")
    assert fit("mamba").hand_patches == ()


def test_too_little_to_guard_names_the_patches_the_fit_did_plan() -> None:
    bloom = fit("bloom")

    assert bloom.refusals[0].structure == "coverage"
    assert bloom.hand_patches[-1] == "BloomForCausalLM.forward: causal_lm_loss_guard, behind the causal_lm_loss slot"


def test_a_loss_head_no_snippet_fits_points_to_its_remedy_and_the_planned_patches() -> None:
    message = fit("cpmant").refusal_message()

    assert "override its forward by hand with the loss behind causal_lm_loss_slot" in message
    assert (
        "Write the config by hand (docs/adding-a-model.md#hand-written-patches), with the patches named above"
        in message
    )


def test_a_moe_model_with_a_dsa_indexer_puts_it_behind_the_dsa_indexer_slot() -> None:
    """deepseek_v32's DeepseekV32Indexer (5.25.0): the fit records it, and its key LayerNorm call is left."""
    deepseek = fit("deepseek_v32", "moe")
    assert deepseek.arguments["indexer"] == "DeepseekV32Indexer"
    assert "dsa_indexer" in deepseek.guarded
    assert all(site["cls"] != "DeepseekV32Indexer" for site in deepseek.arguments["call_sites"])
    assert any(f.where == "DeepseekV32Indexer" and "dsa_indexer_guard" in f.reason for f in deepseek.skipped)


def test_a_moe_model_without_a_dsa_indexer_records_none() -> None:
    assert "indexer" not in fit("qwen3_moe", "moe").arguments


def test_a_head_call_upcasting_its_logits_makes_the_loss_head_return_fp32_logits() -> None:
    """MllamaForCausalLM computes ``self.lm_head(hidden_states).float()``: its logits are fp32 in a bf16 model."""
    assert structure("mllama").causal_lm.postprocess == (("upcast", ""),)
    assert fit("mllama", "dense").arguments["causal_lm"]["logits_fp32"] is True
