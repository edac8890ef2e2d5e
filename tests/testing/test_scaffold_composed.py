"""``modelgraft.models.testing.scaffold_composed``: the sizes a composed scaffold's tests derive from upstream's
classes, on the models whose processors and towers need more than the common rules (docs/scaffolding.md, "The
composed-VLM contract").

idefics2 and idefics3 are facts of the pinned transformers (5.25.0): Idefics2's PIL image processor bounds both a
shortest and a longest edge, and Idefics3's get_image_features drops all-zero images as a row's padding; so are
the names muse_glimmer's and kimi_k25's vision configs give their merge size and temporal patch, and
Cohere2-Vision's processor counting its placeholders from its (torchvision-only) image processor's patch_size.
"""

from __future__ import annotations

import pytest
import torch
from transformers import (
    Cohere2VisionConfig,
    Idefics2ImageProcessorPil,
    Idefics3Config,
    Idefics3ImageProcessorPil,
    Idefics3Processor,
    Kimi_K25Config,
    MuseGlimmerConfig,
)

from modelgraft.models.processor_imports import importable_image_processor_class, importable_processor_class
from modelgraft.models.testing.scaffold_composed import IMAGE_SIDE, ScaffoldComposedVlm, _image_size_options

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
