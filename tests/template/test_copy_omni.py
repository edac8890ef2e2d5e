"""``copier copy`` of an Omni model: the omni choice reads the thinker / speech split from upstream's class tree,
renders the omni recipe call with its exclusions and ``_init_weights`` override, both registry entries with the
processor and the scaffold Omni suite's tests, and the copy passes them; an Omni model the recipe cannot patch is
refused while Copier asks (docs/scaffolding.md, "Omni scaffolds").

The Omni models of transformers outside the zoo are none of them Qwen-Omni-like, so the one copy (shared by the
module) re-scaffolds the zoo's Qwen2.5-Omni in a clone that no longer holds it. The refusals are the category
validator's answers, which Copier raises before it writes anything (test_copy.py shows that a refused copy leaves
nothing behind), so they need no copy.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from modelgraft.scaffold.jinja_extension import scaffold_refusal

from .repos import clone, commit_all, copy_and_generate, git, run
from .test_copy import _assert_ruff_clean


@pytest.fixture(scope="module")
def qwen2_5_omni(
    template_source: Path, built_once: Callable[[str, Callable[[Path], None]], Path]
) -> tuple[Path, Path]:
    """A clone of the template source without the zoo's models/qwen2_5_omni, then a copy of it, generated (without
    the smoke check, a subset of the tests the copy runs below): (repo, model dir).

    Read only by the tests, so one copy serves both xdist workers where worksteal splits this module."""

    def build(folder: Path) -> None:
        repo = clone(template_source, folder / "modelgraft")
        git(repo, "rm", "-r", "--quiet", "models/qwen2_5_omni")
        commit_all(repo, "qwen2_5_omni removed, to be scaffolded again")
        copy_and_generate(repo, "qwen2_5_omni")

    repo = built_once("qwen2_5_omni-copy", build) / "modelgraft"
    return repo, repo / "models" / "qwen2_5_omni"


def _config(model_dir: Path) -> str:
    return (model_dir / "qwen2_5_omni_gpu_patch_gen_config.py").read_text(encoding="utf-8")


def test_an_omni_copy_calls_the_omni_recipe_with_the_towers_and_the_speech_side_it_read(
    qwen2_5_omni: tuple[Path, Path],
) -> None:
    config = _config(qwen2_5_omni[1])
    assert (
        "from modelgraft.generator.recipes import AudioTower, CallSites, LossHead, Mlp, Norm, VisionTower, omni"
        in config
    )
    assert 'vision=VisionTower("Qwen2_5OmniVisionEncoder"),' in config
    assert 'audio=AudioTower("Qwen2_5OmniAudioEncoder"),' in config
    assert 'speech=("talker", "token2wav"),' in config
    # transformers 5.25 sections the positions in the rotary embedding: the text attention's plain function
    assert 'rope="apply_rotary_pos_emb",' in config and "mrope=None," in config


def test_an_omni_copy_overrides_init_weights_without_the_branches_naming_a_speech_class(
    qwen2_5_omni: tuple[Path, Path],
) -> None:
    config = _config(qwen2_5_omni[1])
    assert '"Qwen2_5OmniPreTrainedModel._init_weights",' in config
    assert "def qwen2_5_omni_init_weights(self, module):" in config
    assert "Qwen2_5OmniUpSample1d" in config  # excluded, in speech_classes ...
    assert "isinstance(module, Qwen2_5OmniUpSample1d)" not in config  # ... and no branch of the override names it


def test_an_omni_copy_registers_the_whole_model_and_the_thinker_with_the_processor(
    qwen2_5_omni: tuple[Path, Path],
) -> None:
    init = (qwen2_5_omni[1] / "__init__.py").read_text(encoding="utf-8")
    assert init.count('processor="transformers.Qwen2_5OmniProcessor",') == 2
    assert '    "qwen2_5_omni",\n    modeling=MODELING,\n    config="transformers.Qwen2_5OmniConfig",' in init
    assert (
        '    "qwen2_5_omni_thinker",\n    modeling=MODELING,\n    config="transformers.Qwen2_5OmniThinkerConfig",'
        in init
    )


def test_an_omni_copy_generates_the_thinker_only_modeling(qwen2_5_omni: tuple[Path, Path]) -> None:
    generated = (qwen2_5_omni[1] / "generated" / "patched_modeling_qwen2_5_omni_gpu.py").read_text(encoding="utf-8")
    assert "class Qwen2_5OmniTalkerModel" not in generated and "class Qwen2_5OmniToken2WavModel" not in generated
    for added in ("def dummy_forward(self)", "def get_position_id_func(self)", "def get_metadata_collate_func(self)"):
        assert added in generated, added


def test_an_omni_copy_tests_audio_images_and_videos_through_the_scaffold_omni_suite(
    qwen2_5_omni: tuple[Path, Path],
) -> None:
    tests = (qwen2_5_omni[1] / "tests" / "test_qwen2_5_omni_parity.py").read_text(encoding="utf-8")
    assert "class TestQwen25OmniParity(ScaffoldOmniParitySuite):" in tests
    assert "top_level_config_class=Qwen2_5OmniConfig," in tests
    assert "image_processor_class=Qwen2VLImageProcessorPil," in tests


@pytest.mark.heavy
def test_an_omni_copy_is_ruff_clean_and_passes_its_own_tests(qwen2_5_omni: tuple[Path, Path]) -> None:
    repo, model_dir = qwen2_5_omni
    _assert_ruff_clean(repo, model_dir)
    tests = run_own_tests(repo, "qwen2_5_omni")
    assert " passed" in tests.stdout


def run_own_tests(repo: Path, model: str, *options: str) -> subprocess.CompletedProcess[str]:
    """The copy's own tests in ``repo`` (``options``: a selection), asserting that none failed or was skipped.

    Without the warnings summary: the processor warns about numpy's copy keyword ("... failed").
    """
    arguments = ("-q", "-n", "0", *options, "-p", "no:cacheprovider", "-p", "no:warnings", "-rs")
    tests = run(repo, "-m", "pytest", f"models/{model}", *arguments)
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-3000:]
    assert "failed" not in tests.stdout and "skipped" not in tests.stdout
    return tests


def test_an_audio_model_without_a_thinker_is_refused_as_not_qwen_omni_like() -> None:
    message = scaffold_refusal("phi4_multimodal", "omni")
    assert message.startswith("no scaffold for phi4_multimodal: upstream has structures no snippet handles")
    assert "not Qwen-Omni-like: no class holds a thinker (self.thinker)" in message


def test_an_omni_model_answered_vlm_is_refused_with_the_detected_category() -> None:
    message = scaffold_refusal("qwen2_5_omni", "vlm")
    assert "answered vlm, but upstream's structure is omni" in message
    assert message.endswith("Answer the detected category, omni: the default (drop -d category=vlm).")


def test_a_vlm_answered_omni_is_refused() -> None:
    assert "answered omni, but upstream's structure is vlm" in scaffold_refusal("qwen2_5_vl", "omni")
