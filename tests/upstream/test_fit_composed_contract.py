"""The composed (LLaVA-style) contract and its fit: which contract a VLM is held to, what sets a model apart from
the composed one (one line each), and which sub-model types the scaffold can build (docs/scaffolding.md, "The
composed-VLM contract").

The models named are facts of the pinned transformers (5.25.0): llava, vipllava and their relatives keep their
structure across releases, and the tests say which fact each one relies on.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from modelgraft.generator.recipes.fit import Fit, fit_model
from modelgraft.generator.recipes.fit_composed import registered_model_types
from modelgraft.generator.recipes.render import recipe_call

from .readings import read_model

pytestmark = pytest.mark.upstream_facts


def fit(model: str) -> Fit:
    return fit_model(read_model(model))


def test_a_vlm_without_multimodal_positions_is_held_to_the_composed_contract() -> None:
    llava = read_model("llava").vlm
    assert llava is not None and llava.contract == "composed"
    assert llava.composed_differences == ()


def test_a_vlm_with_multimodal_positions_is_held_to_the_qwen_vl_contract() -> None:
    qwen2_vl = read_model("qwen2_vl").vlm
    assert qwen2_vl is not None and qwen2_vl.contract == "qwen_vl"


def test_the_default_sub_model_types_are_read_from_the_configuration_module() -> None:
    llava = read_model("llava").vlm
    assert llava is not None
    types = {c.config_attr: (c.model_type, c.own) for c in llava.compositions if c.owner == llava.model_class}
    assert types == {"vision_config": ("clip_vision_model", False), "text_config": ("llama", False)}


def test_a_vision_config_the_package_defines_is_its_own_type() -> None:
    internvl = read_model("internvl").vlm
    assert internvl is not None
    own = {c.config_attr: (c.model_type, c.own) for c in internvl.compositions if c.owner == internvl.model_class}
    assert own["vision_config"] == ("internvl_vision", True)


def test_image_features_needing_more_than_pixels_is_one_difference() -> None:
    """lfm2_vl's ``get_image_features`` requires ``spatial_shapes`` and ``pixel_attention_mask`` (5.25.0)."""
    differences = read_model("lfm2_vl").vlm.composed_differences  # type: ignore[union-attr]
    expected = (
        "Lfm2VlModel.get_image_features requires spatial_shapes, pixel_attention_mask: dummy_forward's blank image"
        " (pixel_values alone) cannot feed it"
    )
    assert expected in differences


def test_merge_sizes_beside_a_grid_fit_with_the_blank_grids_side() -> None:
    """video_llama_3's ``get_image_features`` requires ``image_merge_sizes``, one per image of its grid (5.25.0):
    the copy says image_merge_sizes=True, and dummy_forward gives its blank frame's side."""
    vlm = read_model("video_llama_3").vlm
    assert vlm is not None and vlm.image_grid and vlm.image_merge_sizes and not vlm.composed_differences
    _, call = recipe_call("vlm", "VideoLlama3", fit("video_llama_3").arguments)
    assert "    image_grid=True,\n    image_merge_sizes=True,\n" in call


def test_image_features_on_patch_rows_and_their_grid_fit_with_a_blank_grid() -> None:
    """llava_onevision1_5's tower takes Qwen-VL-like patch rows and their ``image_grid_thw`` (5.25.0)."""
    vlm = read_model("llava_onevision1_5").vlm
    assert vlm is not None and vlm.image_grid and not vlm.composed_differences
    _, call = recipe_call("vlm", "LlavaOnevision15", fit("llava_onevision1_5").arguments)
    assert "    image_grid=True,\n" in call


def test_a_grid_of_another_name_is_still_a_difference() -> None:
    """unlimited_ocr's get_image_features takes a patches_grid, which no blank grid stands for."""
    differences = read_model("unlimited_ocr").vlm.composed_differences  # type: ignore[union-attr]
    assert any("takes patches_grid: patch rows on a grid" in d for d in differences)


def test_features_scattered_by_another_method_than_forward_are_a_difference() -> None:
    """ovis2_5's forward hands its features to _merge_visual_features, which calls get_placeholder_mask."""
    differences = read_model("ovis2_5").vlm.composed_differences  # type: ignore[union-attr]
    assert any("Ovis2_5Model.forward leaves get_placeholder_mask to another method" in d for d in differences)


@pytest.mark.parametrize("model", ["idefics2", "idefics3"])
def test_features_scattered_by_an_inputs_merger_the_forward_calls_fit_the_composed_contract(model: str) -> None:
    """idefics2's and idefics3's forward scatters with inputs_merger, which finds the placeholders by
    input_ids == self.config.image_token_id; neither Model has a get_placeholder_mask."""
    vlm = read_model(model).vlm
    assert vlm is not None and vlm.placeholder_mask is None
    assert vlm.placeholder_merger is not None and vlm.placeholder_merger.name == "inputs_merger"
    assert vlm.placeholder_ids == ("self.config.image_token_id",)
    assert vlm.forward_scatters
    assert vlm.composed_differences == ()


def test_a_model_scattering_by_neither_a_placeholder_mask_nor_a_merger_is_a_difference() -> None:
    """blip's Model has no get_placeholder_mask, and its forward calls no method that scatters by an image id."""
    vlm = read_model("blip").vlm
    assert vlm is not None and vlm.placeholder_merger is None
    assert any(
        "BlipModel has no get_placeholder_mask, and its forward calls no method" in d for d in vlm.composed_differences
    )


def test_images_of_all_zeros_dropped_as_padding_give_the_blank_image_of_ones() -> None:
    """idefics3's get_image_features drops images whose pixels are all 0 (a row's padding); llava's keeps them."""
    assert read_model("idefics3").vlm.zero_images_are_padding  # type: ignore[union-attr]
    assert not read_model("llava").vlm.zero_images_are_padding  # type: ignore[union-attr]
    _, call = recipe_call("vlm", "Idefics3", fit("idefics3").arguments)
    assert "    zero_images_are_padding=True,\n" in call
    _, call = recipe_call("vlm", "Llava", fit("llava").arguments)
    assert "zero_images_are_padding" not in call


def test_image_sizes_without_a_tiling_grid_fit_with_the_blank_image_s_size() -> None:
    """mistral3's Pixtral tower takes images of any size with their ``image_sizes`` (5.25.0)."""
    mistral3 = read_model("mistral3").vlm
    assert mistral3 is not None and mistral3.image_sizes and not mistral3.image_tiling
    assert mistral3.composed_differences == ()
    composed = fit("mistral3").arguments["composed"]
    assert (composed["image_sizes"], composed["image_tiles"]) == (True, False)


def test_a_model_that_tiles_its_images_fits_with_the_tiles_sizes() -> None:
    """llava_next's config declares image_grid_pinpoints: its image_sizes are the tiles' (LLaVA-NeXT's anyres)."""
    for model in ("llava_next", "llava_onevision", "llava_next_video"):
        vlm = read_model(model).vlm
        assert vlm is not None and vlm.image_tiling and vlm.composed_differences == (), model
        composed = fit(model).arguments["composed"]
        assert (composed["image_tiles"], composed["image_sizes"]) == (True, False)


def test_a_tiling_model_s_recipe_call_says_so() -> None:
    llava_next = fit("llava_next")
    _, call = recipe_call(llava_next.category, "LlavaNext", llava_next.arguments)
    assert "    image_tiles=True,\n" in call
    _, plain = recipe_call("vlm", "Llava", fit("llava").arguments)
    assert "image_tiles" not in plain


def test_a_language_model_neither_auto_built_nor_a_class_of_the_module_is_a_difference() -> None:
    """blip's Model builds its text model from its own config attribute, not from config.text_config."""
    differences = read_model("blip").vlm.composed_differences  # type: ignore[union-attr]
    assert any("BlipModel builds self.text_model as BlipTextModel(...): neither" in d for d in differences)


def test_a_language_model_that_is_a_class_of_the_module_fits() -> None:
    """llama4 builds its language model as Llama4ForCausalLM(config.text_config): the module's own class."""
    differences = read_model("llama4").vlm.composed_differences  # type: ignore[union-attr]
    assert not any("self.language_model" in d for d in differences)


def test_an_own_moe_text_model_gets_its_experts_guarded_by_the_composed_recipe() -> None:
    """mistral_large4's text model is its own type (mistral_large4_text), routed over experts."""
    large = fit("mistral_large4")
    assert large.arguments["composed"]["own_text"]
    assert large.arguments["composed"]["own_types"]["mistral_large4_text"] == "MistralLarge4TextConfig"
    _, call = recipe_call(large.category, "MistralLarge4", large.arguments)
    assert '    experts=Experts("MistralLarge4TextMoE", activation="self.experts.config.hidden_act"),\n' in call
    assert "layers=" not in call  # the default: model.language_model.layers


def test_a_registered_decoder_s_rope_and_experts_are_not_the_composed_recipe_s() -> None:
    llava = fit("llava")
    assert not llava.arguments["composed"]["own_text"]
    assert "rope" not in llava.arguments and "experts" not in llava.arguments


def test_a_language_model_built_as_a_class_of_the_module_is_its_own_text() -> None:
    """deepseek_ocr2 builds its language model as DeepseekOcr2TextModel(config.text_config), held by its Model."""
    from modelgraft.generator.recipes.fit_composed import own_text, text_layers

    structure = read_model("deepseek_ocr2")
    assert own_text(structure)
    assert text_layers(structure) == "model.language_model.layers"


def test_a_config_field_the_model_sizes_but_the_default_leaves_unset_is_a_difference() -> None:
    """granite4_vision's Model takes len(config.deepstack_layer_map), which defaults to None."""
    differences = read_model("granite4_vision").vlm.composed_differences  # type: ignore[union-attr]
    assert any("len(config.deepstack_layer_map)" in d for d in differences)


def test_a_vision_config_nesting_sub_configs_is_a_difference() -> None:
    """deepseek_ocr2's vision config holds a SAM config and an encoder config."""
    differences = read_model("deepseek_ocr2").vlm.composed_differences  # type: ignore[union-attr]
    assert "the vision config nests sub-configs (sam_config, encoder_config)" in " ".join(differences)


def test_a_composed_vlm_fits_with_the_module_s_own_pieces_and_its_sub_model_types() -> None:
    llava = fit("llava")
    assert not llava.refused
    composed = llava.arguments["composed"]
    assert composed["sub_models"] == {"vision_config": "clip_vision_model", "text_config": "llama"}
    assert composed["tower"] == "vision_tower" and composed["language_model"] == "language_model"
    assert "experts" not in llava.arguments and "rope" not in llava.arguments


def test_the_recipe_call_of_a_composed_vlm_is_composed_vlm() -> None:
    llava = fit("llava")
    imports, call = recipe_call(llava.category, "Llava", llava.arguments)
    assert imports == "from modelgraft.generator.recipes import CallSites, LossHead, composed_vlm"
    assert call.startswith('composed_vlm(\n    config,\n    prefix="Llava",\n')
    assert 'causal_lm=LossHead("LlavaForConditionalGeneration", softcap="", scale=()),' in call


def test_a_decoder_type_without_a_generated_class_is_refused_by_name() -> None:
    """florence2's text model defaults to bart, which no package of this project registers."""
    message = fit("florence2").refusal_message()
    assert "text_config's default model_type bart has no generated class in this project" in message
    assert "copier copy" in message


def test_a_tower_type_without_a_generated_class_is_refused_by_name() -> None:
    """fast_vlm's tower defaults to a timm wrapper, which the library of vision encoders does not hold."""
    message = fit("fast_vlm").refusal_message()
    assert "vision_config's default model_type timm_wrapper has no generated class in this project" in message
    assert "Adding an encoder" in message


def test_the_registered_types_are_read_from_the_model_packages() -> None:
    types = registered_model_types()
    assert {"llama", "qwen2", "clip_vision_model", "siglip_vision_model", "gemma3", "gemma3_text"} <= types
    assert {"qwen3_omni_moe", "qwen3_omni_moe_thinker"} <= types  # registered in a loop over both


def test_a_projector_called_an_aligner_or_a_projection_is_the_projector() -> None:
    """deepseek_vl's ``aligner`` and lighton_ocr's ``vision_projection`` (5.25.0) project the tower's features."""
    for model, attr in (("deepseek_vl", "aligner"), ("lighton_ocr", "vision_projection")):
        vlm = read_model(model).vlm
        assert vlm is not None
        assert attr in [m.attr for m in vlm.mergers if m.place == "model"], model


def test_an_own_tower_s_base_class_gets_the_base_class_changes_too() -> None:
    """internvl's InternViT derives from InternVLVisionPreTrainedModel, a second PreTrainedModel base (5.25.0)."""
    composed = fit("internvl").arguments["composed"]
    assert composed["pretrained_models"] == ["InternVLVisionPreTrainedModel"]
    _, call = recipe_call("vlm", "InternVL", fit("internvl").arguments)
    assert '    pretrained_models=("InternVLVisionPreTrainedModel",),\n' in call


def test_a_text_model_held_under_another_attribute_is_named_in_the_recipe_call() -> None:
    """smolvlm's Model holds its language model as self.text_model, which its forward calls."""
    smolvlm = fit("smolvlm")
    _, call = recipe_call(smolvlm.category, "SmolVLM", smolvlm.arguments)
    assert '    language_model="text_model",\n' in call


def test_images_in_a_row_per_sample_are_read_from_get_image_features() -> None:
    """smolvlm's get_image_features unpacks pixel_values.shape into (batch, images, channels, height, width)."""
    assert read_model("smolvlm").vlm.image_rows  # type: ignore[union-attr]
    assert not read_model("llava").vlm.image_rows  # type: ignore[union-attr]
    _, call = recipe_call("vlm", "SmolVLM", fit("smolvlm").arguments)
    assert "    image_rows=True,\n" in call


def test_a_mask_letting_tokens_attend_both_ways_is_read_from_the_mask_builders_options() -> None:
    """paligemma's Model gives the mask builder block_sequence_ids for its prompt prefix; llava's gives none."""
    assert read_model("paligemma").vlm.bidirectional_mask  # type: ignore[union-attr]
    assert not read_model("llava").vlm.bidirectional_mask  # type: ignore[union-attr]


def test_a_mask_letting_tokens_attend_both_ways_fits_without_the_sequence_parallel_forward() -> None:
    """It is no difference from the contract: the copy says sequence_parallel=False, and its forward refuses
    image batches under sequence parallelism and in packed rows instead."""
    assert not read_model("paligemma").vlm.composed_differences  # type: ignore[union-attr]
    _, call = recipe_call("vlm", "PaliGemma", fit("paligemma").arguments)
    assert "    sequence_parallel=False,\n" in call
    _, call = recipe_call("vlm", "Llava", fit("llava").arguments)
    assert "sequence_parallel" not in call


def test_a_softcap_read_into_a_local_first_is_the_loss_head_s_softcap() -> None:
    """paligemma caps its logits by a local read with getattr from the text config, then tests it for None."""
    head = fit("paligemma").arguments["causal_lm"]
    assert head["softcap"] == "getattr(self.config.get_text_config(), 'final_logit_softcapping', None)"


def test_an_own_text_model_s_sparse_attention_indexer_goes_behind_its_slot() -> None:
    """mistral_large4's text model selects its keys with a DeepSeek sparse attention indexer."""
    assert read_model("mistral_large4").vlm.dsa_indexer == "MistralLarge4TextIndexer"  # type: ignore[union-attr]
    _, call = recipe_call("vlm_moe", "MistralLarge4", fit("mistral_large4").arguments)
    assert '    indexer="MistralLarge4TextIndexer",\n' in call


def test_a_vlm_moe_whose_own_experts_no_kernel_reads_is_refused_with_their_reason() -> None:
    """aria's own text model routes to AriaExperts, which the transposed layout reads (5.25.0); given a bias, as
    no kernel reads them, the composed VLM is refused with the experts' reason."""
    structure = read_model("aria")
    assert structure.moe is not None and structure.moe.experts is not None
    assert fit_model(structure, "vlm_moe").arguments["experts"]["layout"] == "transposed"
    biased = replace(structure.moe.experts, has_bias=True, transposed=False, reason="")
    refused = fit_model(replace(structure, moe=replace(structure.moe, experts=biased)), "vlm_moe")
    reasons = [finding.reason for finding in refused.refusals]
    assert "the routed experts cannot go behind the moe_experts slot: the moe_experts slot takes [E, 2I, H]" in (
        "; ".join(reasons)
    )


@pytest.mark.parametrize("model", ["minicpm_ocr", "minicpmv4_6"])
def test_a_patch_grid_and_ids_handed_to_the_placeholder_mask_fit_the_composed_contract(model: str) -> None:
    """minicpm_ocr's and minicpmv4_6's get_placeholder_mask compares input_ids with its token_id parameter, which
    the forward hands self.config.image_token_id, then video_token_id; get_image_features requires target_sizes,
    each image's patch grid, which a window merger in the tower and the Model's merger divide (5.25.0)."""
    vlm = read_model(model).vlm
    assert vlm is not None and vlm.composed_differences == ()
    assert vlm.placeholder_ids == ("self.config.image_token_id", "self.config.video_token_id")
    assert vlm.image_patch_grid == "target_sizes"
    _, call = recipe_call("vlm", "MiniCPMOcr", fit(model).arguments)
    assert '    image_patch_grid="target_sizes",\n' in call
    assert '(("vision_config", "window_kernel_size", ""), ("", "merge_kernel_size", "merger_times"))' in call


def _training_repository_registering(tmp_path: Path, model_type: str) -> Path:
    """A training repository's folder of model packages, one of which registers ``model_type``."""
    package = tmp_path / "models" / model_type
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from modelgraft.models.registry import register_model\n\n"
        f'register_model("{model_type}", modeling={{"gpu": "models.{model_type}.generated.m"}}, config="x")\n',
        encoding="utf-8",
    )
    return tmp_path / "models"


def test_a_text_model_type_a_training_repository_registers_counts_for_a_composed_vlm_copied_there(
    tmp_path: Path,
) -> None:
    """lfm3_vl's language model is an lfm3 (5.25.0), which no package of this project registers: refused, until the
    copy goes into a repository whose own packages register it (lfm3 scaffolded there first)."""
    structure = read_model("lfm3_vl")
    assert "model_type lfm3 has no generated class" in fit_model(structure).refusal_message()
    there = fit_model(structure, models_roots=(_training_repository_registering(tmp_path, "lfm3"),))
    assert not there.refused, there.refusal_message()
    assert there.arguments["composed"]["sub_models"]["text_config"] == "lfm3"
