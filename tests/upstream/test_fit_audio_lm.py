"""The composed audio fit: an Omni model that holds no thinker but an audio tower next to its language model, both
built from sub-configs, is read as the composed_audio recipe needs it, or refused naming each difference
(docs/scaffolding.md, "Audio language models")."""

from __future__ import annotations

from functools import cache

import pytest

from modelgraft.generator.recipes.fit import Fit, fit_model
from modelgraft.generator.upstream.read_audio_lm import AudioLmInfo

from .readings import read_model

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts


@cache
def audio_lm(model: str) -> AudioLmInfo:
    info = read_model(model).audio_lm
    assert info is not None
    return info


@cache
def fit(model: str) -> Fit:
    return fit_model(read_model(model))


def test_the_model_class_builds_the_audio_tower_and_the_language_model_from_their_sub_configs() -> None:
    info = audio_lm("glmasr")
    assert (info.model_class, info.tower, info.language_model) == ("GlmAsrModel", "audio_tower", "language_model")
    assert dict(info.sub_models) == {"audio_config": "glmasr_encoder", "text_config": "llama"}


def test_the_audio_encoder_type_the_package_defines_is_its_own_with_its_config_class() -> None:
    """The sub-config table names AutoConfig for the audio encoder: the class is found by its model_type."""
    assert audio_lm("glmasr").own_types == (("glmasr_encoder", "GlmAsrEncoderConfig"),)
    assert audio_lm("qwen3_asr").own_types == (("qwen3_asr_encoder", "Qwen3ASREncoderConfig"),)


def test_the_projector_is_the_models_attribute_built_as_a_class_of_its_module() -> None:
    assert audio_lm("audioflamingo3").projector == "multi_modal_projector"


def test_the_frame_mask_and_the_scattered_field_of_get_audio_features_are_read() -> None:
    info = audio_lm("glmasr")
    assert (info.features_mask, info.features_attribute) == ("input_features_mask", "pooler_output")
    assert info.placeholder_ids == ("self.config.audio_token_id",)


def test_get_audio_features_without_a_frame_mask_takes_a_blank_clip_alone() -> None:
    """Voxtral pads every clip to one window and takes no mask: no difference of its get_audio_features."""
    assert audio_lm("voxtral").features_mask == ""
    assert not [d for d in audio_lm("voxtral").differences if "get_audio_features" in d]


def test_a_processor_whose_call_takes_no_audio_is_a_difference() -> None:
    """Voxtral's processor refuses its audio token in the text: clips come in through mistral_common's chat
    template alone, which the tests cannot build a batch with."""
    expected = (
        "VoxtralProcessor.__call__ takes no audio: its clips reach the text through a chat template alone"
        " (Voxtral's), so the tests cannot build a batch of clips with it"
    )
    assert audio_lm("voxtral").differences == (expected,)


def test_an_audio_model_without_a_thinker_but_composed_gets_the_composed_audio_recipe() -> None:
    found = fit("glmasr")
    assert not found.refused
    assert found.arguments["audio_lm"]["model"] == "GlmAsrModel"
    assert found.processors == {"processor": "GlmAsrProcessor"}


def test_the_audio_encoders_own_guards_are_kept_and_the_language_models_are_its_packages() -> None:
    """GLM-ASR's encoder has a RoPE function of its own, guarded here; llama's decoder is the llama package's."""
    found = fit("glmasr")
    assert found.arguments["rope"] == {"function": "apply_rotary_pos_emb", "formulation": "rotate_half_partial"}
    assert {site["cls"] for site in found.arguments["call_sites"]} == {
        "GlmAsrEncoderLayer",
        "GlmAsrMultiModalProjector",
    }
    assert "experts" not in found.arguments


def test_no_rope_in_the_module_is_no_skipped_structure() -> None:
    """AudioFlamingo3's encoder has learned positions: the language model's RoPE is its package's, not a skip."""
    assert not [f for f in fit("audioflamingo3").skipped if f.structure == "rope"]


def test_get_audio_features_needing_more_than_the_clip_and_its_mask_is_a_difference() -> None:
    reasons = [f.reason for f in fit("musicflamingo").refusals]
    assert reasons[0] == (
        "differs from the composed audio contract: MusicFlamingoModel.get_audio_features requires input_ids:"
        " dummy_forward's blank clip (input_features, with its frame mask where it takes one) cannot feed it"
    )


def test_a_model_with_no_placeholder_mask_is_refused_naming_each_missing_piece() -> None:
    reasons = [f.reason for f in fit("qwen2_audio").refusals if f.structure == "omni"]
    assert "differs from the composed audio contract: Qwen2AudioModel has no get_audio_features" in reasons[0]
    assert reasons[1] == "differs from the composed audio contract: Qwen2AudioModel has no get_placeholder_mask"


def test_a_qwen_omni_model_keeps_the_omni_recipe() -> None:
    found = fit("qwen2_5_omni")
    assert read_model("qwen2_5_omni").audio_lm is None
    assert "audio_lm" not in found.arguments and found.arguments["top_level"]


def test_a_required_parameter_get_audio_features_never_reads_is_no_difference() -> None:
    """MOSS's get_audio_features requires a padding_mask its body never reads: dummy_forward passes None."""
    assert audio_lm("moss_transcribe_diarize").features_unread == ("padding_mask",)
    assert not [d for d in audio_lm("moss_transcribe_diarize").differences if "get_audio_features" in d]


def test_a_forward_without_a_cache_to_turn_off_for_packed_documents_is_a_difference() -> None:
    expected = (
        "MossTranscribeDiarizeModel.forward takes no cache and use_cache: the forward cannot turn the cache off for a"
        " row packing documents, which the language model's mask then would not keep apart"
    )
    assert audio_lm("moss_transcribe_diarize").differences == (expected,)
