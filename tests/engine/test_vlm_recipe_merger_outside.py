"""The vlm recipe on a Qwen-VL-like model whose merger sits next to its vision tower in the Model (paddleocr_vl's
projector): the Model gets a dummy_forward through get_image_features, and the sequence-parallel forward runs it
for a batch without images, so the merger's parameters get a gradient on such a rank too (docs/scaffolding.md,
"The Qwen-VL contract"). A model whose merger is the tower's is told none of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from modelgraft.generator import PatchConfig
from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.recipes.vlm import VisionTower, vlm
from modelgraft.generator.snippets import environment

PADDLE = "transformers.models.paddleocr_vl.modeling_paddleocr_vl"
GLM4V = "transformers.models.glm4v.modeling_glm4v"


def _patches(source_module: str, prefix: str, vision: VisionTower, **options: Any) -> dict[str, SnippetRef]:
    config = PatchConfig(source_module=source_module, target_file="patched.py", description="vlm recipe under test")
    vlm(config, prefix=prefix, vision=vision, norms=[], mlps=[], **options)
    return {patch.target: patch.body for patch in config.patches if isinstance(patch.body, SnippetRef)}


def _paddle(merger_outside: bool) -> dict[str, SnippetRef]:
    vision = VisionTower(
        "PaddleOCRVisionModel",
        patch_weight="self.vision_model.embeddings.patch_embedding.weight",
        merge_size="self.config.spatial_merge_size",
        patch_input="images",
        position_merge=1,
        merger_outside=merger_outside,
    )
    return _patches(
        PADDLE,
        "PaddleOCRVL",
        vision,
        text_model="PaddleOCRTextModel",
        videos=False,
        placeholder_ids=("self.config.image_token_id",),
    )


def _variables(patches: Mapping[str, SnippetRef], target: str) -> Mapping[str, Any]:
    return patches[target].variables


def test_a_merger_outside_the_tower_gives_the_model_a_dummy_forward() -> None:
    patches = _paddle(merger_outside=True)
    assert patches["PaddleOCRVLModel.dummy_forward"].name == "vlm_model_dummy_forward"
    assert _variables(patches, "PaddleOCRVLModel.dummy_forward")["tower"] == "visual"


def test_a_batch_without_images_runs_the_model_s_dummy_where_the_merger_is_outside() -> None:
    towers = _variables(_paddle(merger_outside=True), "PaddleOCRVLModel.forward")["towers"]
    assert towers == [["self", "pixel_values"]]


def test_a_merger_inside_the_tower_leaves_the_dummy_to_the_tower() -> None:
    vision = VisionTower("Glm4vVisionModel", rope="apply_rotary_pos_emb_vision")
    patches = _patches(GLM4V, "Glm4v", vision)
    assert not any(target.endswith("Model.dummy_forward") and "Vision" not in target for target in patches)
    assert _variables(patches, "Glm4vModel.forward")["towers"][0] == ["self.visual", "pixel_values"]


def test_the_model_s_dummy_reads_the_tower_s_weight_and_merge_size_through_its_attribute() -> None:
    template = environment().get_template("vlm_model_dummy_forward.py.j2")
    text = template.render(
        tower="visual",
        patch_weight="self.vision_model.embeddings.patch_embedding.weight",
        merge_size="self.config.spatial_merge_size",
        patch_input="images",
    )
    assert "weight = self.visual.vision_model.embeddings.patch_embedding.weight" in text
    assert "side = self.visual.config.spatial_merge_size" in text
    assert "pixel_values = torch.zeros(side * side, *weight.shape[1:]" in text
    assert "self.get_image_features(pixel_values=pixel_values, image_grid_thw=image_grid_thw" in text
