"""The VLM fit: a Qwen-VL-like VLM gets the vlm recipe's arguments read from upstream; any other is refused with
each way it differs (docs/scaffolding.md, "The Qwen-VL contract" and "VLM scaffolds")."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from modelgraft.generator.recipes import fit_vlm
from modelgraft.generator.recipes.fit import Fit, fit_model
from modelgraft.generator.recipes.fit_vlm import VlmFinding, vlm_arguments
from modelgraft.generator.recipes.render import recipe_call
from modelgraft.generator.upstream.structure import RopeInfo
from modelgraft.generator.upstream.vlm_contract import contract_differences

from .readings import read_model

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts


@cache
def fit(model: str, category: str | None = None) -> Fit:
    return fit_model(read_model(model), category)


def vlm_reasons(model: str) -> list[str]:
    return [f.describe() for f in fit(model).refusals if f.structure == "vlm"]


def test_a_vlm_that_fits_the_contract_is_scaffolded_with_its_tower_and_base_model() -> None:
    glm4v = fit("glm4v")
    assert not glm4v.refused and glm4v.category == "vlm"
    assert glm4v.arguments["vision"] == {
        "cls": "Glm4vVisionModel",
        "patch_weight": "self.patch_embed.proj.weight",
        "rope": "apply_rotary_pos_emb_vision",
        "merge_size": "self.spatial_merge_size",
        "attr": "visual",
    }
    assert glm4v.arguments["model"] == "Glm4vModel" and glm4v.arguments["towers"] == {}


def test_the_vision_rope_is_guarded_apart_from_the_text_rope() -> None:
    assert "rope_vision" in fit("glm4v").guarded
    # GLM-4V's text RoPE is partial and interleaved: no formulation a slot recomputes, so it stays upstream's.
    assert fit("glm4v").arguments["rope"] is None and "rope" not in fit("glm4v").guarded


def test_a_sectioned_multimodal_rope_goes_behind_the_rope_slot_through_mrope() -> None:
    """A text attention applying its own function that takes ``mrope_section`` (Qwen2-VL's
    ``apply_multimodal_rotary_pos_emb`` before the rotary embedding sectioned the positions) goes through mrope."""
    structure = read_model("qwen2_vl")
    mrope = RopeInfo(
        kind="function",
        name="apply_multimodal_rotary_pos_emb",
        line=1,
        params=("q", "k", "cos", "sin", "mrope_section", "unsqueeze_dim"),
        formulation="unknown",
        reason="apply_multimodal_rotary_pos_emb (line 1) is the text attention's RoPE: multimodal RoPE",
    )
    sectioned = fit_model(replace(structure, rope=mrope))
    assert sectioned.arguments["mrope"] == "apply_multimodal_rotary_pos_emb" and sectioned.arguments["rope"] is None
    assert "rope" in sectioned.guarded


@pytest.mark.parametrize("model", ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"))
def test_a_plain_text_rope_next_to_the_towers_rope_is_guarded_as_a_dense_models(model: str) -> None:
    """The pinned transformers sections the Qwen-VL family's positions in the rotary embedding: every text
    attention applies the plain apply_rotary_pos_emb, and no mrope is left to guard."""
    fitted = fit(model)
    assert fitted.arguments["rope"] == "apply_rotary_pos_emb" and fitted.arguments["mrope"] == ""
    assert "rope" in fitted.guarded


def test_automodel_towers_are_named_for_the_composition_rewrite() -> None:
    assert fit("qwen3_vl").arguments["towers"] == {
        "vision_config": "Qwen3VLVisionModel",
        "text_config": "Qwen3VLTextModel",
    }


def test_a_vlm_moe_fit_holds_the_moe_pieces_and_a_processor_borrowed_through_the_auto_tables() -> None:
    glm4v_moe = fit("glm4v_moe")
    assert glm4v_moe.category == "vlm_moe" and not glm4v_moe.refused
    assert glm4v_moe.arguments["experts"]["sparse_block"] == "Glm4vMoeTextMoE"
    assert {"moe_experts", "group_limited_router", "load_balancing_loss"} <= set(glm4v_moe.guarded)
    assert glm4v_moe.processors == {"processor": "Glm4vProcessor", "image_processor": "Glm4vImageProcessorPil"}


def test_a_vlm_whose_image_processor_is_torchvision_only_gets_it_on_the_stand_in() -> None:
    """cohere2_vision ships no image_processing_pil_*: its tests build the torchvision class on modelgraft's torch
    stand-in, which the answer image_processor_backend records (docs/scaffolding.md, "The questions")."""
    cohere2_vision = fit("cohere2_vision")

    assert cohere2_vision.processors == {
        "processor": "Cohere2VisionProcessor",
        "image_processor": "Cohere2VisionImageProcessor",
        "image_processor_backend": "torchvision",
    }
    assert not [reason for reason in vlm_reasons("cohere2_vision") if "image processor" in reason]


def test_a_vlm_without_any_image_processor_is_refused_for_it() -> None:
    assert any("no image processor class" in reason for reason in vlm_reasons("glm_ocr"))


def test_the_recipe_call_takes_no_sequence_classification_and_states_the_absent_mrope() -> None:
    imports, call = recipe_call("vlm", "Glm4v", fit("glm4v").arguments)
    assert imports.endswith("VisionTower, vlm")
    assert 'vision=VisionTower("Glm4vVisionModel")' in call and "mrope=None" in call
    assert "sequence_classification" not in call


def test_a_vlm_that_differs_lists_each_difference() -> None:
    """hunyuan_vl has multimodal position ids, so the Qwen-VL contract is the one it is held to; it differs in
    two points in transformers 5.25.0 (neither its tower's name, self.vision_tower, nor its one placeholder mask,
    an image-only model's, is one)."""
    reasons = vlm_reasons("hunyuan_vl")
    assert len(reasons) == 2
    assert all(": differs from the Qwen-VL contract: " in reason for reason in reasons)
    assert "get_rope_index takes" in reasons[0]


def test_a_tower_under_another_name_is_the_recipe_s_tower_attribute() -> None:
    """hy_v4_vl holds its tower as self.vision_tower: no difference, and the recipe call names it."""
    assert read_model("hy_v4_vl").vlm.contract_differences == ()  # type: ignore[union-attr]
    assert fit("hy_v4_vl").arguments["vision"]["attr"] == "vision_tower"


def test_a_vlm_moe_whose_experts_clamp_in_a_unit_method_goes_behind_moe_experts() -> None:
    """hy_v4_vl's experts hand the projection to _apply_gate, DeepSeek-V4's clamped unit with F.silu (5.25.0)."""
    fitted = fit("hy_v4_vl")
    assert not vlm_reasons("hy_v4_vl")
    assert fitted.arguments["experts"]["limit"] == "self.experts.swiglu_limit"
    assert "moe_experts" in fitted.guarded


def test_a_vlm_without_a_processor_is_refused_as_its_tests_could_not_build_inputs() -> None:
    assert any("no processor class" in reason for reason in vlm_reasons("glm_ocr"))


def test_a_vlm_whose_text_model_takes_no_four_row_position_ids_is_refused() -> None:
    """A text model that reads no text row before the rotary rows would let packed documents attend to each
    other. cosmos3_edge's text model reads it in the pinned transformers (``position_ids.shape[0] == 4``);
    read as if it did not, that is its one difference from the contract."""
    structure = read_model("cosmos3_edge")
    assert structure.vlm is not None and structure.vlm.language_model_reads_text_row
    vlm = replace(structure.vlm, language_model_reads_text_row=False)
    without_text_row = replace(structure, vlm=replace(vlm, contract_differences=contract_differences(vlm)))
    refusals: list[VlmFinding] = []
    vlm_arguments(without_text_row, refusals)
    (reason,) = [f.reason for f in refusals]
    assert "Cosmos3EdgeTextModel.forward takes no [4, B, L] position ids" in reason
    assert fit_model(without_text_row).refused


def test_the_text_models_of_the_pinned_vlms_without_a_text_row_are_named() -> None:
    assert any("HunYuanVLTextModel.forward takes no [4, B, L] position ids" in r for r in vlm_reasons("hunyuan_vl"))
    assert fit("hunyuan_vl").refused


def test_cosmos3_edge_fits_the_contract_with_its_projector_next_to_the_tower() -> None:
    """In the pinned transformers cosmos3_edge's text model reads the text row and its tower keeps its merge size."""
    cosmos = fit("cosmos3_edge")
    assert not vlm_reasons("cosmos3_edge") and not cosmos.refused
    assert cosmos.arguments["vision"]["merge_size"] == "self.spatial_merge_size"


def test_a_tower_that_keeps_no_merge_size_takes_its_merge_size_from_its_config() -> None:
    """hunyuan_vl's tower leaves ``spatial_merge_size`` to its patch merger; its vision config declares it
    (read as if the model fitted the contract otherwise)."""
    structure = read_model("hunyuan_vl")
    assert structure.vlm is not None
    fitting = replace(structure, vlm=replace(structure.vlm, contract_differences=()))
    refusals: list[VlmFinding] = []
    vision = vlm_arguments(fitting, refusals)["vision"]
    assert not refusals
    assert vision["merge_size"] == "self.config.spatial_merge_size"
    assert vision["patch_weight"] == "self.embeddings.patch_embedding.weight"


def test_a_package_whose_causal_lm_is_text_only_is_refused_as_a_vlm() -> None:
    """llama4's Llama4ForConditionalGeneration is itself the class holding the tower (5.25.0)."""
    assert any("is not the conditional-generation head" in reason for reason in vlm_reasons("llama4"))


def test_a_vlm_that_also_defines_a_text_only_causal_lm_is_read_by_its_conditional_generation_head() -> None:
    """cohere_compass defines CohereCompassForCausalLM (text) and CohereCompassForConditionalGeneration over
    CohereCompassModel (5.25.0): the VLM's head, config and model_type are the latter's."""
    text = read_model("cohere_compass")
    vlm = text.for_vlm()
    assert text.causal_lm is not None and text.causal_lm.cls == "CohereCompassForCausalLM"
    assert vlm.causal_lm is not None and vlm.causal_lm.cls == "CohereCompassForConditionalGeneration"
    assert (vlm.config_class, vlm.model_type) == ("CohereCompassConfig", "cohere_compass")
    assert fit("cohere_compass").arguments["causal_lm"]["cls"] == "CohereCompassForConditionalGeneration"
    assert not vlm_reasons("cohere_compass")


def test_a_logits_scale_applied_only_when_set_is_read_as_a_scale_by_one_otherwise() -> None:
    """cohere_compass's head multiplies by self.logit_scale under ``if self.logit_scale is not None``."""
    head = fit("cohere_compass").arguments["causal_lm"]
    assert head["scale"] == ["mul", "(self.logit_scale if self.logit_scale is not None else 1)"]


def test_a_refused_vlm_names_the_patches_a_hand_written_config_would_apply() -> None:
    message = fit("hunyuan_vl").refusal_message()
    assert "it would apply:" in message
    assert "HunYuanVLForConditionalGeneration.forward: causal_lm_loss_guard" in message


def test_a_vlm_answered_as_its_text_category_gets_no_vlm_finding() -> None:
    """gemma3's causal LM is a text model of its own: answered dense, it is fitted as dense."""
    gemma3 = fit_model(read_model("gemma3"), "dense")
    assert not [f for f in gemma3.refusals if f.structure == "vlm"]


def test_towers_of_another_package_s_types_are_composed_and_guarded_by_that_package() -> None:
    """glm46v builds glm4v_vision and glm4v_text with AutoModel; glm4v's generated module (the zoo's) guards them."""
    glm46v = fit("glm46v")
    assert not glm46v.refused
    arguments = glm46v.arguments
    assert arguments["sub_models"] == {"vision_config": "glm4v_vision", "text_config": "glm4v_text"}
    assert arguments["vision"]["package"] == "glm4v" and arguments["vision"]["rope"] == ""
    assert arguments["text_model"] is None and arguments["towers"] == {}
    assert set(glm46v.guarded) == {"rms_norm", "glu_activation", "layer_norm", "rope_vision", "causal_lm_loss"}


def test_composed_towers_render_as_build_sub_model_calls_without_this_module_s_text_model() -> None:
    _, call = recipe_call("vlm", "Glm46V", fit("glm46v").arguments)
    assert '    vision=VisionTower("Glm4vVisionModel", rope=None, package="glm4v"),\n' in call
    assert "    compose=True,\n    text_model=None,\n" in call


def test_a_tower_type_no_package_of_this_project_registers_is_refused_naming_the_package_to_scaffold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fit_vlm, "registered_types_in", lambda models_roots=(): frozenset({"glm4v_text"}))
    reasons = [f.describe() for f in fit_model(read_model("glm46v")).refusals if f.structure == "vlm"]
    assert len(reasons) == 1
    assert "vision_config's default model_type glm4v_vision has no generated class in this project" in reasons[0]
    assert "copier copy -d model=glm4v" in reasons[0]


def test_an_image_only_vlm_is_fitted_without_videos_its_placeholders_found_by_the_image_id() -> None:
    """paddleocr_vl: one placeholder mask and no video processor (5.25.0)."""
    paddle = fit("paddleocr_vl")
    assert not paddle.refused and paddle.category == "vlm"
    assert paddle.arguments["videos"] is False
    assert paddle.arguments["placeholder_ids"] == ["self.config.image_token_id"]


def test_a_vlm_that_takes_videos_has_no_image_only_arguments() -> None:
    assert not {"videos", "placeholder_ids"} & set(fit("glm4v").arguments)


def test_a_tower_taking_patches_as_images_with_unmerged_rotary_positions_says_so() -> None:
    vision = fit("paddleocr_vl").arguments["vision"]
    assert vision["patch_weight"] == "self.vision_model.embeddings.patch_embedding.weight"
    assert (vision["patch_input"], vision["position_merge"]) == ("images", 1)
    assert not {"patch_input", "position_merge"} & set(fit("glm4v").arguments["vision"])


def test_a_text_model_not_named_after_the_prefix_is_the_recipe_s_text_model() -> None:
    """PaddleOCRVLModel's language model is PaddleOCRTextModel, not PaddleOCRVLTextModel."""
    assert fit("paddleocr_vl").arguments["text_model"] == "PaddleOCRTextModel"
    assert "text_model" not in fit("glm4v").arguments


def test_the_recipe_call_of_an_image_only_vlm_names_each_difference_from_qwen_vl() -> None:
    _, call = recipe_call("vlm", "PaddleOCRVL", fit("paddleocr_vl").arguments)
    assert '        patch_input="images",\n        position_merge=1,\n' in call
    assert '    text_model="PaddleOCRTextModel",\n    videos=False,\n' in call
    assert '    placeholder_ids=("self.config.image_token_id",),\n' in call


def test_cosmos3_omni_is_refused_for_its_missing_processor_alone() -> None:
    """Its qwen3_vl towers are the zoo's; neither its package nor the Auto tables name a processor (5.25.0)."""
    (reason,) = vlm_reasons("cosmos3_omni")
    assert "no processor class: neither the package nor the Auto tables name one" in reason


def test_a_merger_next_to_the_tower_is_recorded_for_the_model_s_dummy() -> None:
    """paddleocr_vl's projector and cosmos3_edge's merger sit in the Model, next to the tower (5.25.0)."""
    for model in ("paddleocr_vl", "cosmos3_edge"):
        assert fit(model).arguments["vision"]["merger_outside"] is True


def test_a_merger_inside_the_tower_records_nothing() -> None:
    assert "merger_outside" not in fit("glm4v").arguments["vision"]
