"""The Omni fit's refusal: what the omni recipe would keep and drop, read from upstream's class tree, or why a
model is not Qwen-Omni-like (docs/scaffolding.md, "Omni scaffolds")."""

from __future__ import annotations

from functools import cache

from modelgraft.generator.recipes.fit import Fit, fit_model
from modelgraft.generator.upstream.read_omni import OmniInfo
from modelgraft.generator.upstream.reader import read_model


@cache
def omni(model: str) -> OmniInfo:
    info = read_model(model).omni
    assert info is not None
    return info


@cache
def fit(model: str) -> Fit:
    return fit_model(read_model(model))


def test_the_thinker_is_what_the_top_level_class_holds_as_self_thinker() -> None:
    assert omni("qwen2_5_omni").top_level == "Qwen2_5OmniForConditionalGeneration"
    assert omni("qwen2_5_omni").thinker == "Qwen2_5OmniThinkerForConditionalGeneration"


def test_the_speech_side_is_read_from_the_method_that_builds_it() -> None:
    """Qwen-Omni builds its talker and vocoder in enable_talker, not __init__."""
    assert omni("qwen2_5_omni").speech == ("talker", "token2wav")
    assert omni("qwen3_omni_moe").speech == ("talker", "code2wav")


def test_the_speech_classes_are_the_ones_only_the_speech_side_builds() -> None:
    classes = omni("qwen2_5_omni").speech_classes
    for speech in ("Qwen2_5OmniTalkerModel", "Qwen2_5OmniToken2WavDiTModel", "Qwen2_5OmniToken2WavBigVGANModel"):
        assert speech in classes
    for thinker in ("Qwen2_5OmniThinkerForConditionalGeneration", "Qwen2_5OmniAudioEncoder", "Qwen2MLP"):
        assert thinker not in classes


def test_qwen3_omnis_code_predictor_and_code2wav_are_speech_classes() -> None:
    classes = omni("qwen3_omni_moe").speech_classes
    assert "Qwen3OmniMoeTalkerCodePredictorModel" in classes and "Qwen3OmniMoeCode2Wav" in classes
    assert "Qwen3OmniMoeAudioEncoder" not in classes


def test_a_qwen_omni_like_refusal_names_the_recipe_the_thinker_and_the_dropped_prefixes() -> None:
    message = fit("qwen2_5_omni").refusal_message()
    assert "omni models have no scaffold yet" in message
    assert "Qwen-Omni-like: a hand-written config calls the omni recipe (generator/recipes/omni.py)" in message
    assert "its state-dict hook drops talker.*, token2wav.*" in message


def test_an_audio_model_without_a_thinker_is_refused_as_not_qwen_omni_like() -> None:
    for model in ("gemma3n", "moshi", "phi4_multimodal"):
        reasons = [f.reason for f in fit(model).refusals if f.structure == "omni"]
        assert reasons == ["not Qwen-Omni-like: no class holds a thinker (self.thinker)"], model


def test_a_text_model_has_no_omni_report() -> None:
    assert read_model("qwen3").omni is None
