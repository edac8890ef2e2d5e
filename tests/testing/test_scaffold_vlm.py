"""``modelgraft.models.testing.scaffold_vlm``: the special tokens and batches a Qwen-VL scaffold's tests derive from
upstream's classes, for an image-only model (docs/scaffolding.md, "VLM scaffolds").

paddleocr_vl and glm4v are facts of the pinned transformers (5.25.0): PaddleOCR-VL's processor reads its image
placeholder from its tokenizer and has no video processor; GLM-4V's brings its own placeholders for both.
"""

from __future__ import annotations

import pytest
from transformers import (
    Glm4vConfig,
    Glm4vImageProcessorPil,
    Glm4vProcessor,
    PaddleOCRVLConfig,
    PaddleOCRVLImageProcessorPil,
    PaddleOCRVLProcessor,
)

from modelgraft.models.testing.scaffold_vlm import ScaffoldVlm
from modelgraft.models.testing.vlm_processor import synthetic_video, tiny_tokenizer
from modelgraft.models.testing.vlm_suite import VIDEO

pytestmark = pytest.mark.upstream_facts

PADDLE = ScaffoldVlm(
    model_type="paddleocr_vl",
    config_class=PaddleOCRVLConfig,
    processor_class=PaddleOCRVLProcessor,
    image_processor_class=PaddleOCRVLImageProcessorPil,
    causal_lm="PaddleOCRVLForConditionalGeneration",
    base_model="PaddleOCRVLModel",
    patch_config="unused",
    videos=False,
)
GLM4V = ScaffoldVlm(
    model_type="glm4v",
    config_class=Glm4vConfig,
    processor_class=Glm4vProcessor,
    image_processor_class=Glm4vImageProcessorPil,
    causal_lm="Glm4vForConditionalGeneration",
    base_model="Glm4vModel",
    patch_config="unused",
    separate_videos=True,
)


def test_a_named_special_token_is_an_attribute_of_the_tiny_tokenizer_with_its_id() -> None:
    tokenizer = tiny_tokenizer(special_tokens=("<|vision_start|>",), named={"image_token": "<image_token>"})
    assert tokenizer.image_token == "<image_token>"
    assert tokenizer.image_token_id == tokenizer.convert_tokens_to_ids("<image_token>") != tokenizer.unk_token_id


def test_a_placeholder_the_processor_reads_from_its_tokenizer_becomes_a_named_token() -> None:
    assert PADDLE.tokenizer_attributes == {"image_token": "<image_token>"}
    assert PADDLE.tokenizer.image_token == "<image_token>"


def test_a_processor_with_its_own_placeholders_reads_nothing_from_the_tokenizer() -> None:
    assert GLM4V.tokenizer_attributes == {}


def test_an_image_only_model_has_an_image_placeholder_only() -> None:
    assert PADDLE.placeholders == {"image_token_id": "<image_token>"}
    assert set(GLM4V.placeholders) == {"image_token_id", "video_token_id"}


def test_the_tiny_config_finds_images_by_the_tokenizer_s_placeholder_id() -> None:
    assert PADDLE.config().image_token_id == PADDLE.tokenizer.image_token_id


def test_an_image_only_model_s_batch_holds_images_and_text_only() -> None:
    batch = PADDLE.multimodal_batch()
    assert "pixel_values_videos" not in batch and len(batch["image_grid_thw"]) == 4
    assert (
        int((batch["input_ids"] == PADDLE.tokenizer.image_token_id).sum())
        == int((batch["mm_token_type_ids"] == 1).sum())
        > 0
    )


def test_a_video_row_for_an_image_only_model_is_refused() -> None:
    with pytest.raises(ValueError, match="takes no videos"):
        PADDLE.batch([(f"w1 {VIDEO}", [], [synthetic_video(8, 8, seed=1)])])
