"""``copier copy`` of a composed (LLaVA-style) VLM: the vlm answer reads the composed contract from upstream, renders
``composed_vlm`` with the module's own pieces, registers the model with its processor and runs the composed suite
over the model's own processor, and the copy passes it (docs/scaffolding.md, "The composed-VLM contract").

One copy, of LLaVA (a CLIP tower and a Llama decoder, both built by ``build_sub_model`` from the library and the
zoo), shared by the module. What fits and what is refused is specified at fit level in
tests/upstream/test_fit_composed_contract.py; the refusals here are the category validator's answers, which
Copier raises before it writes anything.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from modelgraft.scaffold.jinja_extension import scaffold_refusal

from .repos import clone, copy_model, recorded_answers, run, without
from .test_copy import _assert_ruff_clean


@pytest.fixture(scope="module")
def llava(template_source: Path, built_once: Callable[[str, Callable[[Path], None]], Path]) -> tuple[Path, Path]:
    """A clone of the template source with models/llava copied (generated and smoke-checked): (repo, model dir)."""

    def build(folder: Path) -> None:
        copy_model(without(clone(template_source, folder / "modelgraft"), "llava"), "llava")

    repo = built_once("llava-copy", build) / "modelgraft"
    return repo, repo / "models" / "llava"


def test_a_composed_vlm_copy_calls_composed_vlm_with_the_projector_it_read(llava: tuple[Path, Path]) -> None:
    config = (llava[1] / "llava_gpu_patch_gen_config.py").read_text(encoding="utf-8")
    assert "from modelgraft.generator.recipes import CallSites, LossHead, composed_vlm" in config
    assert (
        'CallSites("LlavaMultiModalProjector", activation="act", activation_config="projector_hidden_act")' in config
    )
    assert "(text_config: llama, vision_config: clip_vision_model)" in config


def test_a_composed_vlm_copy_builds_its_towers_through_build_sub_model(llava: tuple[Path, Path]) -> None:
    generated = (llava[1] / "generated" / "patched_modeling_llava_gpu.py").read_text(encoding="utf-8")
    assert "self.vision_tower = build_sub_model(config.vision_config)" in generated
    assert "self.language_model = build_sub_model(config.text_config)" in generated
    assert "def dummy_forward(self)" in generated
    assert "AutoModel.from_config" not in generated


def test_a_composed_vlm_copy_registers_its_processor(llava: tuple[Path, Path]) -> None:
    init = (llava[1] / "__init__.py").read_text(encoding="utf-8")
    assert 'processor="transformers.LlavaProcessor",' in init


def test_a_composed_vlm_copy_is_ruff_clean_and_passes_its_own_tests(llava: tuple[Path, Path]) -> None:
    repo, model_dir = llava
    _assert_ruff_clean(repo, model_dir)
    tests = run(repo, "-m", "pytest", "models/llava", "-q", "-p", "no:cacheprovider", "-p", "no:warnings", "-rs")
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout and "failed" not in tests.stdout


def test_a_composed_vlm_whose_decoder_has_no_generated_class_is_refused_naming_it() -> None:
    message = scaffold_refusal("florence2", "vlm")
    assert "text_config's default model_type bart has no generated class in this project" in message


def test_a_composed_vlm_whose_features_need_more_than_an_image_is_refused_naming_the_input() -> None:
    assert "Lfm2VlModel.get_image_features requires spatial_shapes, pixel_attention_mask" in scaffold_refusal(
        "lfm2_vl", "vlm"
    )


def test_a_torchvision_only_image_processor_is_rendered_through_the_stand_in(clean_clone: Path) -> None:
    """cohere2_vision ships no PIL image processor: its answers record the torchvision backend, and its test binds
    the class modelgraft's loader gives instead of importing transformers' placeholder (the copy's own tests run
    in the scaffold survey, scaffold-survey cohere2_vision)."""
    model_dir = copy_model(clean_clone, "cohere2_vision", generate=False)
    test = (model_dir / "tests" / "test_cohere2_vision_parity.py").read_text(encoding="utf-8")

    assert recorded_answers(model_dir)["image_processor_backend"] == "torchvision"
    assert "from transformers import Cohere2VisionConfig, Cohere2VisionProcessor\n" in test
    assert (
        'Cohere2VisionImageProcessor = importable_image_processor_class("transformers.Cohere2VisionImageProcessor")'
        in test
    )
    assert "image_processor_class=Cohere2VisionImageProcessor," in test


def test_a_pil_image_processor_records_the_pil_backend(llava: tuple[Path, Path]) -> None:
    """Every tower category records the backend its tests build images with: PIL where upstream has one."""
    assert recorded_answers(llava[1])["image_processor_backend"] == "pil"
