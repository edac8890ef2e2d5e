"""``modelgraft.models.testing.scaffold_composed``: the sizes a composed scaffold's tests derive from upstream's
classes, on the models whose processors and towers need more than the common rules (docs/scaffolding.md, "The
composed-VLM contract").

idefics2 and idefics3 are facts of the pinned transformers (5.25.0): Idefics2's PIL image processor bounds both a
shortest and a longest edge, and Idefics3's get_image_features drops all-zero images as a row's padding; so are
the names muse_glimmer's and kimi_k25's vision configs give their merge size and temporal patch, and
Cohere2-Vision's processor counting its placeholders from its (torchvision-only) image processor's patch_size,
the top-level projector widths of kimi_k25 and muse_glimmer, Step-3.7's text model building a sliding-window mask
whatever its layers and its image processor's vision_patch_size, MiniMax-M3-VL's head computing its aux loss
only when asked, and Aria's projector mapping the tower's patch count to its queries, its image processor padding
every image to 490 or 980 pixels and its processor counting by that side, and MiniCPM-V sizing its images in
patches (``target_sizes``, an image processor of ``scale_resolution`` and ``patch_size``).
"""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AriaConfig,
    AriaImageProcessorPil,
    AriaProcessor,
    Cohere2VisionConfig,
    Idefics2ImageProcessorPil,
    Idefics3Config,
    Idefics3ImageProcessorPil,
    Idefics3Processor,
    Kimi_K25Config,
    MiniCPMOcrConfig,
    MiniMaxM3VLConfig,
    MuseGlimmerConfig,
    Qwen2Config,
    Step3p7Config,
)

from modelgraft.models.processor_imports import importable_image_processor_class, importable_processor_class
from modelgraft.models.testing.composed_vlm_suite import in_dtype
from modelgraft.models.testing.scaffold_composed import (
    GRID,
    IMAGE_SIDE,
    VISION_SIZES,
    ScaffoldComposedVlm,
    _image_size_options,
    _needs_a_window,
)

pytestmark = pytest.mark.upstream_facts


def test_an_image_processor_bounding_both_edges_gets_both_at_the_tiny_side() -> None:
    """Idefics2's resize needs both bounds; both at the tiny side make every image the tower's square."""
    assert _image_size_options(Idefics2ImageProcessorPil)["size"] == {
        "shortest_edge": IMAGE_SIDE,
        "longest_edge": IMAGE_SIDE,
    }


def test_the_placeholders_per_image_are_counted_on_an_image_a_model_does_not_drop_as_padding() -> None:
    """Idefics3 drops all-zero images; the count is its pixel-shuffled tower's: (28 / 7) ** 2 / 2 ** 2 = 4."""
    idefics3 = ScaffoldComposedVlm(
        model_type="idefics3",
        config_class=Idefics3Config,
        processor_class=Idefics3Processor,
        image_processor_class=Idefics3ImageProcessorPil,
        causal_lm="Idefics3ForConditionalGeneration",
        guarded=(),
        tower="vision_model",
        language_model="text_model",
        image_rows=True,
    )
    config = idefics3.config()
    assert idefics3._features_per_image(config) == 4
    batch = idefics3.batch(config, (1,))
    assert int((batch["input_ids"] == config.image_token_id).sum()) == 4


def _grid_scaffold(model: str, prefix: str, config_class: type) -> ScaffoldComposedVlm:
    return ScaffoldComposedVlm(
        model_type=model,
        config_class=config_class,
        processor_class=importable_processor_class(
            f"transformers.models.{model}.processing_{model}.{prefix}Processor"
        ),
        image_processor_class=importable_image_processor_class(f"transformers.{prefix}ImageProcessor"),
        causal_lm=f"{prefix}ForConditionalGeneration",
        guarded=(),
        image_grid=True,
    )


def test_patch_rows_are_cut_at_the_merge_size_and_temporal_patch_a_vision_config_names_otherwise() -> None:
    """muse_glimmer's vision config says merge_size and patch_temporal (2 and 2), not spatial_merge_size and
    temporal_patch_size: its image processor must cut rows of two frames, merged two by two."""
    options = _grid_scaffold("muse_glimmer", "MuseGlimmer", MuseGlimmerConfig)._grid_options()

    assert (options["merge_size"], options["temporal_patch_size"]) == (2, 2)


def test_a_square_merge_kernel_gives_the_image_processor_its_side() -> None:
    """kimi_k25's vision config gives merge_kernel_size as a pair, (2, 2); its image processor takes one side."""
    options = _grid_scaffold("kimi_k25", "Kimi_K25", Kimi_K25Config)._grid_options()

    assert (options["merge_size"], options["temporal_patch_size"]) == (2, 1)


def test_a_processor_counting_from_its_image_processor_s_patch_size_gets_the_tiny_tower_s_side() -> None:
    """Cohere2-Vision's processor writes patch_size ** 2 placeholders per tile, patch_size being its image
    processor's (16 by default); the tiny tower gives (28 / 7) ** 2 / 2 ** 2 = 4 features per tile: side 2."""
    cohere2_vision = ScaffoldComposedVlm(
        model_type="cohere2_vision",
        config_class=Cohere2VisionConfig,
        processor_class=importable_processor_class("transformers.Cohere2VisionProcessor"),
        image_processor_class=importable_image_processor_class("transformers.Cohere2VisionImageProcessor"),
        causal_lm="Cohere2VisionForConditionalGeneration",
        guarded=(),
    )
    config = cohere2_vision.config()
    batch = cohere2_vision.batch(config, (1,))

    assert cohere2_vision._features_per_image(config) == 4
    tiles = batch["pixel_values"].shape[0]
    assert int((batch["input_ids"] == config.image_token_id).sum()) == 4 * tiles
    assert isinstance(batch["pixel_values"], torch.Tensor)


def test_a_projector_width_the_tower_s_default_divides_is_that_multiple_of_the_tiny_tower_s() -> None:
    """muse_glimmer's out_hidden_size (6144) is its tower's 1536 times its 2 x 2 merge: four tiny tower widths;
    its projector_hidden_size (4096), the projector's own inner width, is the tiny text's."""
    muse = _grid_scaffold("muse_glimmer", "MuseGlimmer", MuseGlimmerConfig)
    config = muse.config()

    assert config.out_hidden_size == 4 * VISION_SIZES["hidden_size"]
    assert config.projector_hidden_size == config.text_config.hidden_size


def test_a_projector_width_equal_to_the_tower_s_is_the_tiny_tower_s() -> None:
    """kimi_k25's projection_hidden_size defaults to its tower's width, 1152."""
    config = _grid_scaffold("kimi_k25", "Kimi_K25", Kimi_K25Config).config()

    assert config.projection_hidden_size == VISION_SIZES["hidden_size"]


def test_a_text_model_that_always_builds_a_sliding_mask_gets_the_tiny_window() -> None:
    """Step-3.7's text model builds its sliding-window mask whatever its layer types; its default window is None."""
    step3p7 = type(Step3p7Config().text_config)

    assert _needs_a_window(step3p7, {"layer_types": ["full_attention"] * 3})


def test_a_text_model_with_a_default_window_keeps_it() -> None:
    assert not _needs_a_window(Qwen2Config, {"layer_types": ["full_attention"] * 3})


def _step3p7() -> ScaffoldComposedVlm:
    """Step-3.7's scaffold declaration: an image processor that cuts local crops and names the tower's patch side."""
    return ScaffoldComposedVlm(
        model_type="step3p7",
        config_class=Step3p7Config,
        processor_class=importable_processor_class("transformers.Step3p7Processor"),
        image_processor_class=importable_image_processor_class("transformers.Step3p7ImageProcessor"),
        causal_lm="Step3p7ForConditionalGeneration",
        guarded=(),
    )


def test_an_image_processor_counting_by_the_tower_s_patch_side_gets_the_tiny_side() -> None:
    step3p7 = _step3p7()
    step3p7.config()

    assert step3p7._parts[1].image_processor.vision_patch_size == VISION_SIZES["patch_size"]


def test_local_crops_are_resized_to_the_tiny_image_side() -> None:
    """Step-3.7 resizes each local crop to its image processor's patch_size (504 pixels by default): at the tiny
    image side, a crop is as small a tower input as the image itself, not thousands of patches."""
    step3p7 = _step3p7()
    batch = step3p7.batch(step3p7.config(), (1, 2))

    assert batch["pixel_values_local"].shape[-2:] == (IMAGE_SIDE, IMAGE_SIDE)
    assert batch["num_local_patches"].sum() == batch["pixel_values_local"].shape[0] > 3  # a tall image cut in two


def test_a_guarded_aux_loss_asks_the_head_for_its_router_logits() -> None:
    minimax = ScaffoldComposedVlm(
        model_type="minimax_m3_vl",
        config_class=MiniMaxM3VLConfig,
        processor_class=importable_processor_class("transformers.MiniMaxM3VLProcessor"),
        image_processor_class=importable_image_processor_class("transformers.MiniMaxM3VLImageProcessor"),
        causal_lm="MiniMaxM3SparseForConditionalGeneration",
        guarded=("moe_experts", "load_balancing_loss"),
        image_grid=True,
    )

    assert minimax.batch(minimax.config(), (1,))["output_router_logits"] is True


def test_a_bf16_batch_casts_the_pixels_and_leaves_the_ids() -> None:
    batch = in_dtype(
        {"pixel_values": torch.zeros(2, 3), "input_ids": torch.ones(1, 4, dtype=torch.long)}, torch.bfloat16
    )

    assert (batch["pixel_values"].dtype, batch["input_ids"].dtype) == (torch.bfloat16, torch.long)


def _aria() -> ScaffoldComposedVlm:
    return ScaffoldComposedVlm(
        model_type="aria",
        config_class=AriaConfig,
        processor_class=AriaProcessor,
        image_processor_class=AriaImageProcessorPil,
        causal_lm="AriaForConditionalGeneration",
        guarded=(),
    )


def test_a_projector_keyed_on_the_patch_count_maps_the_tiny_patches_to_half_as_many_queries() -> None:
    """Aria's projector looks its query count up by the tower's patch count (defaults 1225 and 4900)."""
    config = _aria().config()

    assert config.projector_patch_to_query_dict == {GRID * GRID: GRID * GRID // 2}


def test_images_padded_to_a_fixed_side_are_cut_into_the_tiny_patches_and_counted_by_that_side() -> None:
    """Aria's image processor pads every image to max_image_size (980 by default; it refuses any but 490 and 980):
    the tower cuts 980 pixels into 4 x 4 patches of 245, and the processor's size_conversion maps 980 to the count."""
    aria = _aria()
    config, processor = aria._parts

    assert aria.image_side == 980
    assert (config.vision_config.image_size, config.vision_config.patch_size) == (980, 980 // GRID)
    assert processor.size_conversion == {980: GRID * GRID // 2}
    batch = aria.batch(config, (1, 2))
    assert batch["pixel_values"].shape[-2:] == (980, 980)
    placeholders = (batch["input_ids"] == config.image_token_id).sum(dim=1).tolist()
    assert placeholders == [GRID * GRID // 2, 2 * GRID * GRID // 2]


def test_a_fixed_image_side_without_a_query_dict_keeps_the_tiny_side() -> None:
    """Step-3.7's image processor has an int max_image_size too, but its config maps no patch count to queries."""
    step3p7 = _step3p7()

    assert step3p7.image_side == IMAGE_SIDE


def test_images_sized_in_patches_go_through_an_image_processor_at_the_tiny_patch_and_scale() -> None:
    """MiniCPM-V's get_image_features takes each image's (height, width) in patches: its image processor scales
    images to about the tiny image and cuts the tiny patches, and the processor's target sizes say how many."""
    minicpm = ScaffoldComposedVlm(
        model_type="minicpm_ocr",
        config_class=MiniCPMOcrConfig,
        processor_class=importable_processor_class("transformers.MiniCPMOcrProcessor"),
        image_processor_class=importable_image_processor_class("transformers.MiniCPMOcrImageProcessor"),
        causal_lm="MiniCPMOcrForConditionalGeneration",
        guarded=(),
        image_patch_grid="target_sizes",
    )
    config = minicpm.config()
    image_processor = minicpm._parts[1].image_processor
    batch = minicpm.batch(config, (1,))

    assert (image_processor.patch_size, image_processor.scale_resolution) == (VISION_SIZES["patch_size"], IMAGE_SIDE)
    rows, cols = (int(n) for n in batch["target_sizes"][0])
    assert 0 < rows * cols <= 2 * GRID * GRID
