"""``copier copy`` of a VLM: the vlm choice reads upstream, renders the recipe, the registry entry with the
processor and the VLM suite's tests, and the copy passes them; a VLM the recipe cannot patch is refused while
Copier asks (docs/scaffolding.md, "VLM scaffolds").

One copy only, of GLM-4V (a Qwen-VL-like VLM outside the Qwen-VL family), shared by the module; the refusals are
the category validator's answers, which Copier raises before it writes anything (test_copy.py shows that a
refused copy leaves nothing behind), so they need no copy. GLM-4V is the one VLM outside the zoo's Qwen-VL family
that the scaffold passes (docs/scaffolding.md, "VLM scaffolds"): where a user scaffolded it into this repository,
the copy goes into a clone that no longer holds it (repos.py's ``without``). Which VLMs fit is specified at fit level in
tests/upstream/test_fit_vlm_contract.py; the VLM-MoE copy (glm4v_moe) goes through ``scaffold-survey``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from modelgraft.scaffold.jinja_extension import scaffold_refusal, upstream

from .repos import clone, copy_model, run, without
from .test_copy import _assert_ruff_clean


@pytest.fixture(scope="module")
def glm4v(template_source: Path, built_once: Callable[[str, Callable[[Path], None]], Path]) -> tuple[Path, Path]:
    """A clone of the template source with models/glm4v copied (generated and smoke-checked): (repo, model dir).

    Read only by the tests, so one copy serves both xdist workers where worksteal splits this module."""

    def build(folder: Path) -> None:
        copy_model(without(clone(template_source, folder / "modelgraft"), "glm4v"), "glm4v")

    repo = built_once("glm4v-copy", build) / "modelgraft"
    return repo, repo / "models" / "glm4v"


def test_a_vlm_copy_registers_its_processor_with_the_model(glm4v: tuple[Path, Path]) -> None:
    init = (glm4v[1] / "__init__.py").read_text(encoding="utf-8")
    assert 'processor="transformers.Glm4vProcessor",' in init
    assert 'config="transformers.Glm4vConfig",' in init


def test_a_vlm_copy_registers_the_sub_models_automodel_builds_from_its_module(glm4v: tuple[Path, Path]) -> None:
    """glm4v_vision and glm4v_text resolve to the generated module, so glm46v's AutoModel towers can build them."""
    init = (glm4v[1] / "__init__.py").read_text(encoding="utf-8")
    for sub_type, config in (("glm4v_vision", "Glm4vVisionConfig"), ("glm4v_text", "Glm4vTextConfig")):
        assert f'    "{sub_type}",\n' in init and f'config="transformers.{config}",' in init, sub_type


def test_a_vlm_copy_calls_the_vlm_recipe_with_the_tower_it_read(glm4v: tuple[Path, Path]) -> None:
    config = (glm4v[1] / "glm4v_gpu_patch_gen_config.py").read_text(encoding="utf-8")
    assert "from modelgraft.generator.recipes import CallSites, LossHead, Mlp, Norm, VisionTower, vlm" in config
    assert 'vision=VisionTower("Glm4vVisionModel"),' in config
    assert "mrope=None," in config


def test_a_vlm_copy_generates_the_towers_helpers(glm4v: tuple[Path, Path]) -> None:
    generated = (glm4v[1] / "generated" / "patched_modeling_glm4v_gpu.py").read_text(encoding="utf-8")
    for added in ("def dummy_forward(self)", "def get_position_id_func(self)", "def get_metadata_collate_func(self)"):
        assert added in generated, added
    assert "rope_vision_slot(" in generated


def test_a_vlm_copy_tests_images_and_videos_through_the_scaffold_suite(glm4v: tuple[Path, Path]) -> None:
    tests = (glm4v[1] / "tests" / "test_glm4v_parity.py").read_text(encoding="utf-8")
    assert "class TestGlm4vParity(ScaffoldVlmParitySuite):" in tests
    assert "image_processor_class=Glm4vImageProcessorPil," in tests
    assert "separate_videos=True," in tests  # GLM-4V's video frames are image tokens


@pytest.mark.heavy
def test_a_vlm_copy_is_ruff_clean_and_passes_its_own_tests(glm4v: tuple[Path, Path]) -> None:
    repo, model_dir = glm4v
    _assert_ruff_clean(repo, model_dir)
    # Without the warnings summary: GLM-4V's processor warns about numpy's copy keyword ("... failed"), which
    # would read as a failure in the output.
    tests = run(repo, "-m", "pytest", "models/glm4v", "-q", "-p", "no:cacheprovider", "-p", "no:warnings", "-rs")
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout and "failed" not in tests.stdout and "skipped" not in tests.stdout


def test_a_vlm_outside_the_qwen_vl_contract_is_refused_with_each_difference() -> None:
    """hunyuan_vl has multimodal position ids (the Qwen-VL contract's) and differs from it in two points in
    transformers 5.25.0 (its one placeholder mask is an image-only model's, which fits); a VLM without them is
    held to the composed contract (test_copy_composed.py)."""
    message = scaffold_refusal("hunyuan_vl", "vlm")
    assert message.startswith("no scaffold for hunyuan_vl: upstream has structures no snippet handles")
    assert "HunYuanVLModel.get_rope_index takes" in message
    assert "HunYuanVLTextModel.forward takes no [4, B, L] position ids" in message
    assert "get_placeholder_mask" not in message


def test_a_vlm_without_a_processor_is_refused() -> None:
    assert "no processor class: neither the package nor the Auto tables name one" in scaffold_refusal("glm_ocr")


def test_a_vlm_answer_defaults_to_the_vlm_heads_config_and_a_text_answer_to_the_text_heads() -> None:
    """cohere_compass defines a text-only causal LM beside its VLM head; gemma3 is scaffolded as dense too."""
    assert (upstream("cohere_compass")["config_class"], upstream("cohere_compass")["model_type"]) == (
        "CohereCompassConfig",
        "cohere_compass",
    )
    assert (upstream("gemma3", "dense")["config_class"], upstream("gemma3", "dense")["model_type"]) == (
        "Gemma3TextConfig",
        "gemma3_text",
    )


def test_a_vlm_whose_causal_lm_is_text_only_is_refused() -> None:
    assert "the causal LM Llama4ForCausalLM is not the conditional-generation head" in scaffold_refusal("llama4")


def test_a_vlm_moe_model_answered_vlm_is_refused_with_the_detected_category() -> None:
    message = scaffold_refusal("glm4v_moe", "vlm")
    assert "answered vlm, but upstream's structure is vlm_moe" in message
    assert message.endswith("Answer the detected category, vlm_moe: the default (drop -d category=vlm).")


def test_a_dense_model_answered_vlm_is_refused() -> None:
    assert "answered vlm, but upstream's structure is dense" in scaffold_refusal("mistral", "vlm")
