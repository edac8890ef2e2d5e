"""``modelgraft.models.testing.scaffold_composed``: the sizes a composed scaffold's tests derive from upstream's
classes, on the models whose processors and towers need more than the common rules (docs/scaffolding.md, "The
composed-VLM contract").

idefics2 and idefics3 are facts of the pinned transformers (5.25.0): Idefics2's PIL image processor bounds both a
shortest and a longest edge, and Idefics3's get_image_features drops all-zero images as a row's padding.
"""

from __future__ import annotations

import pytest
from transformers import Idefics2ImageProcessorPil, Idefics3Config, Idefics3ImageProcessorPil, Idefics3Processor

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
