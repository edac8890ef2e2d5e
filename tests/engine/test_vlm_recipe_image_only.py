"""The vlm recipe on an image-only Qwen-VL-like model (paddleocr_vl: one placeholder mask, no video input) and on a
tower that takes its patches as small images with unmerged rotary positions: what each snippet is told
(docs/scaffolding.md, "The Qwen-VL contract"). A video model's snippets are told none of it, so its generated code
stays as it was."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from modelgraft.generator import PatchConfig
from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.errors import SnippetError
from modelgraft.generator.recipes.vlm import VisionTower, vlm
from modelgraft.generator.snippets import environment, render

PADDLE = "transformers.models.paddleocr_vl.modeling_paddleocr_vl"
GLM4V = "transformers.models.glm4v.modeling_glm4v"
IMAGE_ID = "self.config.image_token_id"


def _variables(source_module: str, prefix: str, vision: VisionTower, **options: Any) -> dict[str, Mapping[str, Any]]:
    """target -> the variables of the snippet the recipe plans there."""
    config = PatchConfig(source_module=source_module, target_file="patched.py", description="vlm recipe under test")
    vlm(config, prefix=prefix, vision=vision, norms=[], mlps=[], **options)
    return {patch.target: patch.body.variables for patch in config.patches if isinstance(patch.body, SnippetRef)}


def _paddle() -> dict[str, Mapping[str, Any]]:
    vision = VisionTower(
        "PaddleOCRVisionModel",
        patch_weight="self.vision_model.embeddings.patch_embedding.weight",
        merge_size="self.config.spatial_merge_size",
        patch_input="images",
        position_merge=1,
    )
    return _variables(
        PADDLE, "PaddleOCRVL", vision, text_model="PaddleOCRTextModel", videos=False, placeholder_ids=(IMAGE_ID,)
    )


def test_an_image_only_forward_feeds_the_tower_from_pixel_values_alone() -> None:
    assert _paddle()["PaddleOCRVLModel.forward"]["towers"] == [["self.visual", "pixel_values"]]


def test_an_image_only_forward_finds_its_placeholders_by_the_image_id() -> None:
    assert _paddle()["PaddleOCRVLModel.forward"]["placeholder_ids"] == [IMAGE_ID]


def test_a_tower_taking_small_images_gets_a_blank_image_batch_in_dummy_forward() -> None:
    assert _paddle()["PaddleOCRVisionModel.dummy_forward"]["patch_input"] == "images"


def test_unmerged_rotary_positions_are_precomputed_unmerged() -> None:
    variables = _paddle()
    for owner in ("PaddleOCRVLModel", "PaddleOCRVLForConditionalGeneration"):
        assert variables[f"{owner}.get_metadata_collate_func"]["position_merge"] == 1


def test_the_text_model_named_apart_from_the_prefix_gets_the_packed_documents_guard() -> None:
    assert "PaddleOCRTextModel.forward" in _paddle()


def test_a_video_model_s_snippets_are_told_none_of_it() -> None:
    variables = _variables(GLM4V, "Glm4v", VisionTower("Glm4vVisionModel"))
    forward = variables["Glm4vModel.forward"]
    assert forward["towers"] == [["self.visual", "pixel_values"], ["self.visual", "pixel_values_videos"]]
    assert "placeholder_ids" not in forward
    assert "patch_input" not in variables["Glm4vVisionModel.dummy_forward"]
    assert "position_merge" not in variables["Glm4vModel.get_metadata_collate_func"]


def test_an_image_only_model_without_placeholder_ids_is_refused() -> None:
    config = PatchConfig(source_module=PADDLE, target_file="patched.py", description="vlm recipe under test")
    with pytest.raises(ValueError, match="placeholder_ids"):
        vlm(config, prefix="PaddleOCRVL", vision=VisionTower("PaddleOCRVisionModel"), videos=False)


def _rendered(snippet: str, **variables: Any) -> str:
    """An added method's snippet rendered alone (no upstream member to read)."""
    text, _ = render(SnippetRef(name=snippet, variables=variables), None, environment())
    return text


DUMMY = {"patch_weight": "self.patch_embedding.weight", "merge_size": "self.config.spatial_merge_size"}


def test_dummy_forward_of_a_tower_taking_small_images_builds_one_batch_of_blank_patches() -> None:
    text = _rendered("vlm_vision_dummy_forward", **DUMMY, patch_input="images")
    assert "torch.zeros(1, side * side, *weight.shape[1:], dtype=weight.dtype, device=weight.device)" in text
    assert "weight[0].numel()" not in text


def test_dummy_forward_by_default_builds_flat_rows() -> None:
    text = _rendered("vlm_vision_dummy_forward", **DUMMY)
    assert "torch.zeros(side * side, weight[0].numel(), dtype=weight.dtype, device=weight.device)" in text


def test_dummy_forward_refuses_a_patch_input_it_does_not_know() -> None:
    with pytest.raises(SnippetError, match="patch_input is rows or images"):
        _rendered("vlm_vision_dummy_forward", **DUMMY, patch_input="tiles")


def test_the_metadata_step_takes_a_constant_merge_where_told_else_the_vision_config_s() -> None:
    assert "partial(vision_metadata, 1)" in _rendered("vlm_metadata_collate_func", position_merge=1)
    default = _rendered("vlm_metadata_collate_func")
    assert "partial(vision_metadata, self.config.vision_config.spatial_merge_size)" in default
