"""The VLM reader on the real pinned sources: Qwen-VL's four models, then glm4v and llava for what differs."""

from __future__ import annotations

from functools import cache

import pytest

from modelgraft.generator.upstream.structure import ModelStructure
from modelgraft.generator.upstream.vlm_structure import VlmInfo

from .readings import read_model

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts

QWEN_VL = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")


@cache
def read(model: str) -> ModelStructure:
    return read_model(model)


def vlm(model: str) -> VlmInfo:
    info = read(model).vlm
    assert info is not None, model
    return info


@pytest.mark.parametrize(
    ("model", "model_class", "tower"),
    [
        ("qwen2_vl", "Qwen2VLModel", "Qwen2VisionTransformerPretrainedModel"),
        ("qwen2_5_vl", "Qwen2_5_VLModel", "Qwen2_5_VisionTransformerPretrainedModel"),
        ("qwen3_vl", "Qwen3VLModel", "Qwen3VLVisionModel"),
        ("qwen3_vl_moe", "Qwen3VLMoeModel", "Qwen3VLMoeVisionModel"),
        ("glm4v", "Glm4vModel", "Glm4vVisionModel"),
    ],
)
def test_the_model_holds_its_vision_tower_as_visual(model: str, model_class: str, tower: str) -> None:
    info = vlm(model)
    assert info.model_class == model_class
    assert info.vision is not None and (info.vision.attr, info.vision.cls) == ("visual", tower)
    assert info.vision.config_attr == "vision_config"


def test_qwen2_vl_builds_its_towers_with_from_config_of_its_own_classes() -> None:
    info = vlm("qwen2_vl")
    assert info.vision.built_by == "Qwen2VisionTransformerPretrainedModel._from_config(...)"
    assert info.language_model is not None and info.language_model.cls == "Qwen2VLTextModel"
    assert info.compositions == ()


@pytest.mark.parametrize(("model", "merger"), [("qwen2_vl", "PatchMerger"), ("qwen2_5_vl", "Qwen2_5_VLPatchMerger")])
def test_the_merger_is_read_inside_the_tower(model: str, merger: str) -> None:
    (found,) = vlm(model).mergers
    assert (found.attr, found.cls, found.place, found.deepstack) == ("merger", merger, "tower", False)


def test_qwen3_vl_reports_its_deepstack_mergers_beside_the_merger() -> None:
    mergers = {m.attr: m for m in vlm("qwen3_vl").mergers}
    assert set(mergers) == {"merger", "deepstack_merger_list"}
    assert mergers["deepstack_merger_list"].deepstack
    assert mergers["deepstack_merger_list"].cls == "Qwen3VLVisionPatchMerger"


@pytest.mark.parametrize("model", QWEN_VL)
def test_get_rope_index_is_the_models_and_requires_mm_token_type_ids(model: str) -> None:
    index = vlm(model).rope_index
    assert index is not None and index.owner == vlm(model).model_class
    assert index.required == ("input_ids", "mm_token_type_ids")
    assert index.params[:4] == ("input_ids", "mm_token_type_ids", "image_grid_thw", "video_grid_thw")
    assert index.var_keyword


def test_qwen2_5_vl_get_rope_index_also_takes_second_per_grid_ts() -> None:
    assert "second_per_grid_ts" in vlm("qwen2_5_vl").rope_index.params


@pytest.mark.parametrize("model", QWEN_VL)
def test_placeholder_mask_returns_an_image_and_a_video_mask(model: str) -> None:
    mask = vlm(model).placeholder_mask
    assert mask is not None and mask.returns == 2
    assert mask.params == ("input_ids", "inputs_embeds", "image_features", "video_features")


@pytest.mark.parametrize("model", QWEN_VL)
def test_qwen_vl_text_rope_is_apply_rotary_pos_emb_and_vision_rope_is_separate(model: str) -> None:
    """In the pinned transformers the rotary embedding sections the multimodal positions (``mrope_section``)
    itself, so the text attention of the whole family, Qwen2-VL's included, applies the plain rotate-half
    ``apply_rotary_pos_emb`` to the sectioned cos/sin; the tower's function is read apart."""
    s = read(model)
    assert (s.rope.name, s.rope.formulation) == ("apply_rotary_pos_emb", "rotate_half")
    assert "mrope_section" not in s.rope.params
    assert s.vlm.vision_rope.name == "apply_rotary_pos_emb_vision"


@pytest.mark.parametrize(
    ("model", "tower", "language"),
    [
        ("qwen3_vl", "Qwen3VLVisionModel", "Qwen3VLTextModel"),
        ("qwen3_vl_moe", "Qwen3VLMoeVisionModel", "Qwen3VLMoeTextModel"),
    ],
)
def test_automodel_composition_names_the_sub_config_and_the_class_it_builds(
    model: str, tower: str, language: str
) -> None:
    built = {c.attr: (c.config_attr, c.builds) for c in vlm(model).compositions}
    assert built == {"visual": ("vision_config", tower), "language_model": ("text_config", language)}


def test_qwen2_vl_processors_are_read_from_its_package() -> None:
    kinds = {(p.kind, p.cls) for p in vlm("qwen2_vl").processors}
    assert kinds == {
        ("processor", "Qwen2VLProcessor"),
        ("image_processor", "Qwen2VLImageProcessor"),
        ("image_processor_pil", "Qwen2VLImageProcessorPil"),
        ("video_processor", "Qwen2VLVideoProcessor"),
    }


def test_qwen3_vl_borrows_qwen2_vls_image_processor_through_the_auto_tables() -> None:
    kinds = {p.kind: p for p in vlm("qwen3_vl").processors}
    assert kinds["processor"].cls == "Qwen3VLProcessor"
    assert kinds["image_processor_pil"].cls == "Qwen2VLImageProcessorPil"
    assert kinds["image_processor_pil"].module == "transformers.models.auto.image_processing_auto"


def test_qwen3_vl_moe_without_processing_modules_reads_qwen3_vls_processor_from_the_auto_tables() -> None:
    kinds = {p.kind: p.cls for p in vlm("qwen3_vl_moe").processors}
    assert kinds["processor"] == "Qwen3VLProcessor"


def test_a_package_no_processing_module_or_auto_table_names_has_no_processors() -> None:
    assert vlm("glm_ocr").processors == ()


@pytest.mark.parametrize("model", (*QWEN_VL, "glm4v"))
def test_qwen_vl_family_and_glm4v_fit_the_contract(model: str) -> None:
    assert vlm(model).contract_differences == ()


def test_glm4v_fits_the_contract_but_its_text_rope_is_not_a_known_body() -> None:
    s = read("glm4v")
    assert s.rope.name == "apply_rotary_pos_emb" and s.rope.formulation == "unknown" and s.rope.reason


def test_llava_holds_an_automodel_tower_a_projector_and_one_mask() -> None:
    """The tower is the class AutoModel builds for the default clip_vision_model, read in clip's package."""
    info = vlm("llava")
    assert (info.vision.attr, info.vision.cls, info.vision.package) == ("vision_tower", "CLIPVisionModel", "clip")
    assert {(c.attr, c.config_class, c.builds) for c in info.compositions} == {
        ("vision_tower", "AutoConfig", None),
        ("language_model", "AutoConfig", None),
    }
    (projector,) = info.mergers
    assert (projector.attr, projector.place) == ("multi_modal_projector", "model")
    assert info.rope_index is None and info.placeholder_mask.returns == 1


def test_llava_differs_from_the_qwen_vl_contract_in_rope_index_and_text_row() -> None:
    """Its default language model is llama's LlamaModel, whose forward reads no [4, B, L] position ids; its one
    placeholder mask is an image-only model's (no video processor), which the contract accepts."""
    assert vlm("llava").image_only
    differences = vlm("llava").contract_differences
    assert len(differences) == 2
    assert "no get_rope_index" in differences[0]
    assert differences[1].startswith("LlamaModel.forward takes no [4, B, L] position ids")


def test_gemma3s_language_model_built_through_a_local_is_still_read() -> None:
    composed = {c.attr: c.builds for c in vlm("gemma3").compositions}
    assert composed["language_model"] == "Gemma3TextModel"


def test_a_text_model_has_no_vlm_report() -> None:
    assert read("qwen3").vlm is None


def test_a_processor_borrowed_through_the_auto_tables_brings_its_packages_image_processors() -> None:
    """glm4v_moe's processor is GLM-4V's; its PIL image processor is read from the glm4v package."""
    kinds = {p.kind: (p.cls, p.module) for p in vlm("glm4v_moe").processors}
    assert kinds["processor"][0] == "Glm4vProcessor"
    assert kinds["image_processor_pil"] == (
        "Glm4vImageProcessorPil",
        "transformers.models.glm4v.image_processing_pil_glm4v",
    )


def test_a_borrowed_processor_brings_what_its_package_borrows_in_turn() -> None:
    """qwen3_vl_moe -> Qwen3-VL's processor -> qwen3_vl's image processor, which is Qwen2-VL's."""
    kinds = {p.kind: p.cls for p in vlm("qwen3_vl_moe").processors}
    assert kinds["image_processor_pil"] == "Qwen2VLImageProcessorPil"


@pytest.mark.parametrize(
    ("model", "weight", "merge_size"),
    [
        ("qwen2_vl", "self.patch_embed.proj.weight", True),
        ("glm4v", "self.patch_embed.proj.weight", True),
        ("cosmos3_edge", "self.embeddings.patch_embedding.weight", True),
        # hunyuan_vl's tower leaves the merge size to its patch merger.
        ("hunyuan_vl", "self.embeddings.patch_embedding.weight", False),
    ],
)
def test_the_towers_patch_weight_and_merge_size_are_read(model: str, weight: str, merge_size: bool) -> None:
    tower = vlm(model).vision
    assert tower is not None
    assert (tower.patch_weight, tower.spatial_merge_size) == (weight, merge_size)


def test_glm4v_finds_image_and_video_placeholders_by_one_token() -> None:
    assert vlm("glm4v").video_shares_image_token and vlm("glm4v_moe").video_shares_image_token


@pytest.mark.parametrize("model", QWEN_VL)
def test_qwen_vl_tells_image_and_video_placeholders_apart(model: str) -> None:
    assert not vlm(model).video_shares_image_token


@pytest.mark.parametrize("model", ("paddleocr_vl", "hunyuan_vl", "glm_image"))
def test_a_model_with_one_placeholder_mask_and_no_video_processor_is_image_only(model: str) -> None:
    """Their one mask finds images by image_token_id; none of them has a second mask sharing it."""
    info = vlm(model)
    assert info.image_only and not info.video_shares_image_token
    assert info.placeholder_ids == ("self.config.image_token_id",)


@pytest.mark.parametrize("model", (*QWEN_VL, "glm4v", "minicpmv4_7"))
def test_a_model_that_takes_videos_is_not_image_only(model: str) -> None:
    """minicpmv4_7 returns one mask too, but has a video processor and takes pixel_values_videos."""
    assert not vlm(model).image_only


def test_paddleocr_vl_fits_the_contract_as_an_image_only_model() -> None:
    assert vlm("paddleocr_vl").contract_differences == ()


def test_paddleocr_vl_s_tower_embeds_each_patch_as_an_image_three_attributes_deep() -> None:
    """PaddleOCRVisionModel -> vision_model -> embeddings -> patch_embedding, a Conv2d over [B, N, C, P, P]."""
    tower = vlm("paddleocr_vl").vision
    assert tower is not None
    assert tower.patch_weight == "self.vision_model.embeddings.patch_embedding.weight"
    assert tower.patch_input == "images"


def test_paddleocr_vl_s_tower_lays_out_its_rotary_positions_unmerged() -> None:
    """It merges patches in the projector after the tower, so its encoder passes 1 to get_vision_position_ids."""
    assert vlm("paddleocr_vl").vision.position_merge == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("model", (*QWEN_VL, "glm4v"))
def test_the_qwen_vl_towers_take_flat_rows_and_merge_their_rotary_positions(model: str) -> None:
    tower = vlm(model).vision
    assert tower is not None and (tower.patch_input, tower.position_merge) == ("rows", None)


def test_an_activation_wrapping_a_guarded_norm_call_is_not_a_call_site() -> None:
    """glm4v's merger calls self.act1(self.post_projection_norm(x)): the norm is guarded, the GELU is left."""
    (site,) = [s for s in read("glm4v").call_sites if s.cls == "Glm4vVisionPatchMerger"]
    assert site.layer_norms == ("post_projection_norm",) and site.activation is None


def test_a_hub_that_stores_the_fused_experts_transposed_is_read_from_the_conversion_mapping() -> None:
    """qwen3_vl_moe's conversion_mapping.py entry transposes experts.gate_up_proj / down_proj on load."""
    assert vlm("qwen3_vl_moe").hub_transposes_experts
    assert not vlm("glm4v_moe").hub_transposes_experts  # per-expert hub weights, fused by the qwen2_moe entry


def test_layer_norms_a_config_table_chooses_are_read_as_chosen_call_sites() -> None:
    """InternViT builds both norms as NORM2FN[config.norm_type](...): nn.LayerNorm or its own RMSNorm."""
    (site,) = [s for s in read("internvl").call_sites if s.cls == "InternVLVisionLayer"]
    assert (site.layer_norms, site.chosen_layer_norms) == ((), ("layernorm_before", "layernorm_after"))


def test_a_layer_norm_or_identity_by_a_config_switch_is_read_as_a_chosen_call_site() -> None:
    """Janus's vision attention builds q_norm and k_norm as nn.LayerNorm(...) if use_qk_norm else nn.Identity()."""
    (site,) = [s for s in read("janus").call_sites if s.cls == "JanusVisionAttention"]
    assert site.chosen_layer_norms == ("q_norm", "k_norm")


def test_the_own_sub_types_automodel_builds_from_this_module_are_read_with_their_config_classes() -> None:
    """AutoModel maps qwen2_5_vl_vision to Qwen2_5_VisionTransformerPretrainedModel, a class of modeling_qwen2_5_vl."""
    assert vlm("qwen2_5_vl").sub_model_types == (
        ("qwen2_5_vl_vision", "Qwen2_5_VLVisionConfig"),
        ("qwen2_5_vl_text", "Qwen2_5_VLTextConfig"),
    )


def test_a_sub_type_automodel_maps_to_the_package_s_own_model_is_not_a_sub_type() -> None:
    """qwen2_vl's vision config has the package's own model_type (qwen2_vl), which AutoModel maps to Qwen2VLModel."""
    assert vlm("qwen2_vl").sub_model_types == (("qwen2_vl_text", "Qwen2VLTextConfig"),)


def test_sub_types_of_another_package_are_not_this_package_s_to_register() -> None:
    """hyperclovax_vision_v2's sub-configs default to qwen2_5_vl_vision and hyperclovax: AutoConfig, not its own."""
    assert vlm("hyperclovax_vision_v2").sub_model_types == ()


def test_an_automodel_tower_of_another_package_s_default_type_is_read_in_that_package() -> None:
    """glm46v's vision_config defaults to glm4v_vision: AutoModel builds glm4v's Glm4vVisionModel, merger and all."""
    info = vlm("glm46v")
    assert (info.vision.cls, info.vision.package) == ("Glm4vVisionModel", "glm4v")
    assert (info.vision.patch_weight, info.vision.spatial_merge_size) == ("self.patch_embed.proj.weight", True)
    assert [(m.owner, m.attr, m.place) for m in info.mergers] == [("Glm4vVisionModel", "merger", "tower")]


def test_another_package_s_tower_keeps_its_rotary_function_out_of_this_module_s_report() -> None:
    """glm46v's module defines no rotary function: the tower's is glm4v's, guarded in glm4v's generated module."""
    assert vlm("glm46v").vision_rope is None


@pytest.mark.parametrize("model", ["cosmos3_omni", "glm46v"])
def test_vlms_whose_automodel_towers_default_to_a_qwen_vl_family_package_fit_the_contract(model: str) -> None:
    assert vlm(model).contract_differences == ()


def test_another_package_s_language_model_is_read_for_the_text_row() -> None:
    """llava's language model defaults to llama's LlamaModel, whose forward has no position_ids.shape[0] == 4."""
    assert vlm("llava").language_model.package == "llama"
    assert not vlm("llava").language_model_reads_text_row


def test_a_composed_vlm_s_own_sub_types_are_left_to_its_recipe() -> None:
    """internvl registers internvl_vision through the composed recipe's own_types, not as a Qwen-VL sub-type."""
    assert vlm("internvl").sub_model_types == ()
