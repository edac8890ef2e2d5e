"""``copier copy`` of an Omni + MoE model: the omni_moe choice reads the thinker / speech split and the MoE thinker's
own pieces from upstream, renders the omni_moe recipe call, a converter over the thinker's text config that leaves
the speech side alone, both registry entries with the converter, and the scaffold Omni-MoE suite's tests, and the
copy passes them; an omni_moe answer the recipe cannot take is refused while Copier asks (docs/scaffolding.md,
"Omni scaffolds").

No Qwen-Omni-like MoE model of transformers is outside the zoo, so the one copy (shared by the module) re-scaffolds
the zoo's Qwen3-Omni-MoE in a clone that no longer holds it, generated without the smoke check, and runs the part of
its own tests that covers what the omni_moe choice adds to the omni one: the audio tower sized for Qwen3-Omni's
chunked Conv2d (eager parity on a batch whose clip spans two chunks), each MoE slot's reference kernel, the router
logits in the output, the experts' activation recorded in ``__init__``, the expert-parallel plan and the whole-model
checkpoint through the converter (the thinker's hub names renamed, its experts fused). The refusals are the category validator's answers, which Copier
raises before it writes anything (test_copy.py shows that a refused copy leaves nothing behind), so they need no copy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from transformers import (
    Qwen2_5OmniProcessor,
    Qwen2_5OmniThinkerConfig,
    Qwen3OmniMoeProcessor,
    Qwen3OmniMoeThinkerConfig,
)

from modelgraft.models.testing.scaffold_omni import tiny_audio_sizes, tiny_clips, tiny_top_level_sizes, token_id_keys
from modelgraft.scaffold.jinja_extension import scaffold_refusal

from .repos import clone, commit_all, copy_and_generate, git
from .test_copy import _assert_ruff_clean
from .test_copy_omni import run_own_tests

MODEL = "qwen3_omni_moe"

#: The copy's own tests the module runs (pytest -k), what the omni_moe choice adds to the omni one, and how many
#: tests they select (the reference kernel in each of the two MoE slots).
OWN_TESTS = " or ".join(
    f"({selector})"
    for selector in (
        "test_processor_expands_each_audio_clip_into_its_encoder_length",
        "test_chunked_loss_and_gradients_match_upstream and fp32",
        "test_reference_kernel_in_one_slot_matches_upstream and fp32 and (moe_experts or softmax_topk_router)",
        "test_router_logits_and_aux_loss_equal_upstreams",
        "test_output_holds_the_router_logits_as_upstreams_does",
        "test_parallel_plan_shards_every_fused_expert_tensor_by_expert",
        "test_the_model_type_has_a_checkpoint_converter_for_its_expert_keys",
        "test_whole_upstream_checkpoint_loads_through_the_converter_without_the_talkers_experts",
        "test_every_generated_class_takes_upstreams_checkpoint_conversions",
    )
)
OWN_TEST_COUNT = 10


@pytest.fixture(scope="module")
def qwen3_omni_moe(
    template_source: Path, built_once: Callable[[str, Callable[[Path], None]], Path]
) -> tuple[Path, Path]:
    """A clone of the template source without the zoo's models/qwen3_omni_moe, then a copy of it, generated (without
    the smoke check): (repo, model dir).

    Read only by the tests, so one copy serves both xdist workers where worksteal splits this module."""

    def build(folder: Path) -> None:
        repo = clone(template_source, folder / "modelgraft")
        git(repo, "rm", "-r", "--quiet", f"models/{MODEL}")
        commit_all(repo, f"{MODEL} removed, to be scaffolded again")
        copy_and_generate(repo, MODEL, hub_checkpoint="Qwen/Qwen3-Omni-30B-A3B-Instruct")

    repo = built_once(f"{MODEL}-copy", build) / "modelgraft"
    return repo, repo / "models" / MODEL


def _read(model_dir: Path, name: str) -> str:
    return (model_dir / name).read_text(encoding="utf-8")


def test_an_omni_moe_copy_calls_the_omni_moe_recipe_with_the_experts_and_the_router(
    qwen3_omni_moe: tuple[Path, Path],
) -> None:
    config = _read(qwen3_omni_moe[1], f"{MODEL}_gpu_patch_gen_config.py")
    assert "omni_moe(\n    config,\n" in config
    assert (
        'experts=Experts("Qwen3OmniMoeThinkerTextSparseMoeBlock", activation="self.experts.activation_name"),'
        in config
    )
    assert 'router=Router("Qwen3OmniMoeThinkerTextTopKRouter", kind="softmax_topk"),' in config
    # transformers 5.25's thinker hands its output the router logits itself (5.16's left them out: a patch kept them)
    assert "router_logits=" not in config


def test_an_omni_moe_copy_records_the_experts_activation_in_init(qwen3_omni_moe: tuple[Path, Path]) -> None:
    config = _read(qwen3_omni_moe[1], f"{MODEL}_gpu_patch_gen_config.py")
    assert '    "activation_name_init",\n    "Qwen3OmniMoeThinkerTextExperts",\n' in config
    generated = _read(qwen3_omni_moe[1], f"generated/patched_modeling_{MODEL}_gpu.py")
    assert "        self.activation_name = config.hidden_act\n" in generated


def test_an_omni_moe_copy_keeps_the_thinker_text_base_class_only_the_talker_derives_from(
    qwen3_omni_moe: tuple[Path, Path],
) -> None:
    config = _read(qwen3_omni_moe[1], f"{MODEL}_gpu_patch_gen_config.py")
    assert 'apply_pretrained_model(config, "Qwen3OmniMoeThinkerTextPreTrainedModel", prefix="Qwen3OmniMoe")' in config
    generated = _read(qwen3_omni_moe[1], f"generated/patched_modeling_{MODEL}_gpu.py")
    assert "class Qwen3OmniMoeThinkerTextPreTrainedModel(PreTrainedModel):" in generated
    assert "class Qwen3OmniMoeTalkerForConditionalGeneration" not in generated


def test_an_omni_moe_copy_converts_the_thinkers_experts_and_leaves_the_speech_side_alone(
    qwen3_omni_moe: tuple[Path, Path],
) -> None:
    checkpoint = _read(qwen3_omni_moe[1], "checkpoint.py")
    assert 'SPEECH_PREFIXES = ("talker.", "code2wav.")' in checkpoint
    assert (
        '    thinker = getattr(config, "thinker_config", config)\n    text = thinker.get_text_config()\n' in checkpoint
    )
    assert "    return OmniThinkerConverter(\n        FusedExpertsConverter(\n" in checkpoint
    assert "            ignore=SPEECH_PREFIXES,\n" in checkpoint
    assert "Qwen/Qwen3-Omni-30B-A3B-Instruct" in checkpoint


def test_an_omni_moe_copy_registers_the_converter_for_both_model_types(qwen3_omni_moe: tuple[Path, Path]) -> None:
    init = _read(qwen3_omni_moe[1], "__init__.py")
    assert init.count('processor="transformers.Qwen3OmniMoeProcessor",') == 2
    for model_type in ("qwen3_omni_moe", "qwen3_omni_moe_thinker"):
        converter = f'"{model_type}", "modelgraft.models.{MODEL}.checkpoint.checkpoint_converter"'
        assert f"register_converter({converter})" in init or f"register_converter(\n    {converter}\n)" in init


def test_an_omni_moe_copy_tests_through_the_scaffold_omni_moe_suite(qwen3_omni_moe: tuple[Path, Path]) -> None:
    tests = _read(qwen3_omni_moe[1], f"tests/test_{MODEL}_parity.py")
    assert "class TestQwen3OmniMoeParity(ScaffoldOmniMoeParitySuite):" in tests
    assert '    router="Qwen3OmniMoeThinkerTextTopKRouter",\n' in tests


def test_an_omni_moe_copy_is_ruff_clean_and_passes_its_own_moe_and_audio_tests(
    qwen3_omni_moe: tuple[Path, Path],
) -> None:
    repo, model_dir = qwen3_omni_moe
    _assert_ruff_clean(repo, model_dir)
    tests = run_own_tests(repo, MODEL, "-k", OWN_TESTS)
    assert f"{OWN_TEST_COUNT} passed" in tests.stdout


def test_an_omni_moe_answer_for_a_dense_omni_model_is_refused_with_the_detected_category() -> None:
    message = scaffold_refusal("qwen2_5_omni", "omni_moe")
    assert "answered omni_moe, but upstream's structure is omni" in message
    assert "upstream has no routed experts" in message
    assert message.endswith("Answer the detected category, omni: the default (drop -d category=omni_moe).")


def test_an_omni_answer_for_an_omni_moe_model_is_refused_naming_its_experts() -> None:
    message = scaffold_refusal(MODEL, "omni")
    assert "answered omni, but upstream's structure is omni_moe" in message
    assert "upstream routes to experts in Qwen3OmniMoeThinkerTextSparseMoeBlock" in message


def test_an_omni_moe_model_without_a_thinker_is_refused_as_not_qwen_omni_like() -> None:
    message = scaffold_refusal("gemma4", "omni_moe")
    assert "not Qwen-Omni-like: no class holds a thinker (self.thinker)" in message


# -- what the copy's tests are sized by: Qwen3-Omni's processor and config classes, read at run time --------------


def test_the_copys_audio_tower_takes_the_chunk_size_its_processor_counts_placeholders_for() -> None:
    qwen3 = tiny_audio_sizes(Qwen3OmniMoeThinkerConfig, 96, Qwen3OmniMoeProcessor)
    assert (qwen3["n_window"], qwen3["n_window_infer"], qwen3["conv_chunksize"]) == (50, 100, 1)
    assert tiny_audio_sizes(Qwen2_5OmniThinkerConfig, 96, Qwen2_5OmniProcessor)["n_window"] == 8


def test_the_copys_audio_clip_spans_two_of_the_towers_chunks() -> None:
    assert tiny_clips({"n_window": 50}) == ((1.3, 0.2, 0.3), 2)  # chunks of 100 mel frames: 1 s
    assert tiny_clips({"n_window": 8}) == ((0.3, 0.2, 0.3), 1)  # the Omni suite's own clips


def test_the_copys_special_tokens_and_video_rate_are_read_from_the_config_and_processor_classes() -> None:
    assert token_id_keys(Qwen3OmniMoeThinkerConfig)["image_token"] == "image_token_id"
    assert token_id_keys(Qwen2_5OmniThinkerConfig)["image_token"] == "image_token_index"
    assert tiny_top_level_sizes(Qwen3OmniMoeThinkerConfig, Qwen3OmniMoeProcessor) == {"position_id_per_seconds": 13}
