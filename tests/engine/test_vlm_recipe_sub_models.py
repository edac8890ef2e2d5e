"""The vlm recipe on a Qwen-VL-like model whose towers are other packages' generated classes (glm46v's glm4v towers):
its ``__init__`` builds them through ``build_sub_model``, and the tower's own pieces (``dummy_forward``, the vision
RoPE guard) are left to the module that defines the tower (docs/scaffolding.md, "The Qwen-VL contract")."""

from __future__ import annotations

from modelgraft.generator import PatchConfig
from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.recipes.vlm import VisionTower, vlm

GLM46V = "transformers.models.glm46v.modeling_glm46v"


def _snippets() -> dict[str, str]:
    """target -> snippet name of each patch the recipe plans on glm46v, its tower glm4v's (RoPE named all the same)."""
    config = PatchConfig(source_module=GLM46V, target_file="patched.py", description="vlm recipe under test")
    vision = VisionTower("Glm4vVisionModel", rope="apply_rotary_pos_emb_vision", package="glm4v")
    vlm(config, prefix="Glm46V", vision=vision, norms=[], mlps=[], compose=True, text_model=None)
    return {patch.target: patch.body.name for patch in config.patches if isinstance(patch.body, SnippetRef)}


def test_composed_sub_models_are_built_by_build_sub_model_in_the_model_s_init() -> None:
    assert _snippets()["Glm46VModel.__init__"] == "vlm_composed_towers_init"


def test_another_package_s_tower_gets_neither_dummy_forward_nor_a_vision_rope_guard_here() -> None:
    snippets = set(_snippets().values())
    assert not snippets & {"vlm_vision_dummy_forward", "vlm_rope_vision_guard"}


def test_the_model_still_gets_its_sequence_parallel_forward_and_position_ids() -> None:
    snippets = _snippets()
    assert snippets["Glm46VModel.forward"] == "vlm_sequence_parallel_forward"
    assert snippets["Glm46VModel.get_position_id_func"] == "vlm_position_id_func"
