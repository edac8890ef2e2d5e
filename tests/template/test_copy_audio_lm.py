"""``copier copy`` of an audio language model: an Omni model that holds no thinker but an audio tower next to its
language model gets the composed_audio recipe call, registers the generated module for its own audio encoder
type, tests through the audio suite, and the copy passes its tests (docs/scaffolding.md, "Audio language models").

One copy of GLM-ASR (an encoder with a RoPE function of its own, a Llama decoder from the zoo) is shared by the
module; the refusals are the category validator's answers, which Copier raises before it writes anything.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from modelgraft.scaffold.jinja_extension import scaffold_refusal

from .repos import clone, copy_and_generate
from .test_copy import _assert_ruff_clean
from .test_copy_omni import run_own_tests


@pytest.fixture(scope="module")
def glmasr(template_source: Path, built_once: Callable[[str, Callable[[Path], None]], Path]) -> tuple[Path, Path]:
    """A clone of the template source with a copy of GLM-ASR, generated (without the smoke check, a subset of the
    tests the copy runs below): (repo, model dir). Read only by the tests."""

    def build(folder: Path) -> None:
        copy_and_generate(clone(template_source, folder / "modelgraft"), "glmasr")

    repo = built_once("glmasr-copy", build) / "modelgraft"
    return repo, repo / "models" / "glmasr"


def test_an_audio_model_copy_calls_the_composed_audio_recipe_with_its_encoders_guards(
    glmasr: tuple[Path, Path],
) -> None:
    config = (glmasr[1] / "glmasr_gpu_patch_gen_config.py").read_text(encoding="utf-8")
    assert "from modelgraft.generator.recipes import CallSites, LossHead, Mlp, Rope, composed_audio" in config
    assert 'rope=Rope("apply_rotary_pos_emb", formulation="rotate_half_partial"),' in config
    assert "(audio language model), GPU backend" in config


def test_an_audio_model_copy_registers_the_model_with_its_processor_and_its_own_encoder_type(
    glmasr: tuple[Path, Path],
) -> None:
    init = (glmasr[1] / "__init__.py").read_text(encoding="utf-8")
    assert '    "glmasr",\n' in init and 'processor="transformers.GlmAsrProcessor",' in init
    assert '    "glmasr_encoder",\n' in init and 'config="transformers.GlmAsrEncoderConfig",' in init


def test_an_audio_model_copy_generates_dummy_forward_and_the_sequence_parallel_forward(
    glmasr: tuple[Path, Path],
) -> None:
    generated = (glmasr[1] / "generated" / "patched_modeling_glmasr_gpu.py").read_text(encoding="utf-8")
    assert "def dummy_forward(self):" in generated
    assert "placeholder_outputs(" in generated and "(input_ids == self.config.audio_token_id)" in generated
    assert "build_sub_model(config.audio_config)" in generated


def test_an_audio_model_copy_tests_through_the_audio_suite(glmasr: tuple[Path, Path]) -> None:
    tests = (glmasr[1] / "tests" / "test_glmasr_parity.py").read_text(encoding="utf-8")
    assert "class TestGlmAsrParity(ScaffoldAudioLmSuite):" in tests
    assert "processor_class=GlmAsrProcessor," in tests


@pytest.mark.heavy
def test_an_audio_model_copy_is_ruff_clean_and_passes_its_own_tests(glmasr: tuple[Path, Path]) -> None:
    repo, model_dir = glmasr
    _assert_ruff_clean(repo, model_dir)
    assert " passed" in run_own_tests(repo, "glmasr").stdout


def test_an_audio_model_whose_processor_takes_no_clips_is_refused_before_anything_is_written() -> None:
    message = scaffold_refusal("voxtral", "omni")
    assert "differs from the composed audio contract: VoxtralProcessor.__call__ takes no audio" in message
