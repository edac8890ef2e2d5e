"""The Omni fit: what the omni recipe keeps and drops, read from upstream's class tree, or why a model is not
Qwen-Omni-like (docs/scaffolding.md, "Omni scaffolds")."""

from __future__ import annotations

from functools import cache

import pytest

from modelgraft.generator.recipes.fit import Fit, fit_model
from modelgraft.generator.upstream.read_omni import OmniInfo

from .readings import read_model

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts


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


def test_a_qwen_omni_like_model_fits_the_omni_recipe() -> None:
    assert not fit("qwen2_5_omni").refused, fit("qwen2_5_omni").refusal_message()


def test_the_thinker_model_holds_the_towers_and_the_text_decoder() -> None:
    """transformers 5.25's thinker holds a thinker model (``self.model``), as a Qwen-VL head holds its model."""
    info = omni("qwen2_5_omni")
    assert (info.thinker_model, info.audio, info.vision, info.text_model) == (
        "Qwen2_5OmniThinkerModel",
        "Qwen2_5OmniAudioEncoder",
        "Qwen2_5OmniVisionEncoder",
        "Qwen2_5OmniThinkerTextModel",
    )


def test_the_fit_passes_the_thinkers_towers_and_the_speech_attributes_whose_keys_the_hook_drops() -> None:
    arguments = fit("qwen2_5_omni").arguments
    assert arguments["model"] == "Qwen2_5OmniThinkerModel"
    assert arguments["vision"] == {"cls": "Qwen2_5OmniVisionEncoder", "rope": "apply_rotary_pos_emb_vision"}
    assert arguments["audio"]["cls"] == "Qwen2_5OmniAudioEncoder"
    assert arguments["speech"] == ["talker", "token2wav"]
    assert arguments["top_level"] == "Qwen2_5OmniForConditionalGeneration"


def test_the_text_rope_sectioned_by_the_rotary_embedding_goes_behind_the_rope_slot() -> None:
    """transformers 5.25 sections the positions in the rotary embedding: the text attention calls the plain function."""
    arguments = fit("qwen2_5_omni").arguments
    assert (arguments["mrope"], arguments["rope"]) == (None, "apply_rotary_pos_emb")


def test_qwen3_omnis_audio_tower_is_sized_by_its_one_channel_conv2d() -> None:
    audio = fit("qwen3_omni_moe").arguments["audio"]
    assert audio == {
        "cls": "Qwen3OmniMoeAudioEncoder",
        "input_weight": "self.conv2d1.weight",
        "mel_bins": "self.num_mel_bins",
    }


def test_no_guard_is_planned_on_a_class_only_the_speech_side_uses() -> None:
    arguments = fit("qwen2_5_omni").arguments
    guarded = {part["cls"] for key in ("norms", "mlps", "call_sites") for part in arguments[key]}
    assert guarded and not guarded & set(arguments["speech_classes"])


def test_the_audio_towers_final_layer_norm_call_is_guarded() -> None:
    sites = {site["cls"]: site["layer_norms"] for site in fit("qwen2_5_omni").arguments["call_sites"]}
    assert sites["Qwen2_5OmniAudioEncoder"] == ["ln_post"]


def test_a_deprecated_alias_of_a_speech_class_is_a_speech_class() -> None:
    """Qwen2.5-Omni's UpSample1d derives from Qwen2_5OmniUpSample1d and nothing builds it."""
    assert {"UpSample1d", "AMPBlock", "SnakeBeta"} <= set(omni("qwen2_5_omni").speech_classes)


def test_init_weights_loses_exactly_the_branches_naming_a_speech_class() -> None:
    init = omni("qwen2_5_omni").init_weights
    assert init is not None and init.owner == "Qwen2_5OmniPreTrainedModel"
    assert init.dropped == ("Qwen2_5OmniUpSample1d", "Qwen2_5OmniDownSample1d")
    assert "kaiser_sinc_filter1d" not in init.body
    assert "isinstance(module, SinusoidsPositionEmbedding)" in init.body
    assert init.body.count("isinstance(") == 1  # the one branch upstream has beside the vocoder's two


def test_init_weights_imports_name_what_the_kept_body_uses_from_absolute_modules() -> None:
    assert omni("qwen2_5_omni").init_weights.imports == (  # type: ignore[union-attr]
        "from transformers import initialization as init",
        "from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import SinusoidsPositionEmbedding",
    )
    assert omni("qwen3_omni_moe").init_weights.imports == (  # type: ignore[union-attr]
        "from transformers import initialization as init",
        (
            "from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import "
            "Qwen3OmniMoeThinkerTextSparseMoeBlock, SinusoidsPositionEmbedding"
        ),
    )


def test_the_top_level_members_that_only_serve_audio_output_are_refused() -> None:
    assert fit("qwen3_omni_moe").arguments["refused"] == {"generate": "generation", "enable_talker": "audio output"}


def test_the_processor_and_its_pil_image_processor_come_from_the_auto_tables() -> None:
    assert fit("qwen2_5_omni").processors == {
        "processor": "Qwen2_5OmniProcessor",
        "image_processor": "Qwen2VLImageProcessorPil",
    }


def test_an_omni_moe_model_fits_the_omni_moe_recipe_with_its_experts_router_and_aux_loss() -> None:
    found = fit("qwen3_omni_moe")
    assert not found.refused, found.refusal_message()
    assert {"moe_experts", "softmax_topk_router", "load_balancing_loss"} <= set(found.guarded)
    assert found.arguments["experts"]["sparse_block"] == "Qwen3OmniMoeThinkerTextSparseMoeBlock"
    assert found.arguments["router"]["cls"] == "Qwen3OmniMoeThinkerTextTopKRouter"


def test_a_base_class_the_speech_side_only_derives_from_is_kept() -> None:
    """The talker derives from the thinker text model's own PreTrainedModel, which nothing builds (public API)."""
    assert "Qwen3OmniMoeThinkerTextPreTrainedModel" not in omni("qwen3_omni_moe").speech_classes
    assert "Qwen3OmniMoeTalkerForConditionalGeneration" in omni("qwen3_omni_moe").speech_classes


def test_the_kept_pretrained_model_classes_beside_the_base_class_get_its_conversions() -> None:
    assert fit("qwen3_omni_moe").arguments["pretrained_models"] == ["Qwen3OmniMoeThinkerTextPreTrainedModel"]
    assert "pretrained_models" not in fit("qwen2_5_omni").arguments


def test_experts_whose_config_is_annotated_without_their_activation_record_it_in_init() -> None:
    """Upstream annotates the thinker's experts' config as the thinker's config, which declares no hidden_act."""
    arguments = fit("qwen3_omni_moe").arguments
    assert omni("qwen3_omni_moe").experts_activation_init == ("Qwen3OmniMoeThinkerTextExperts", "hidden_act")
    assert arguments["experts"]["activation"] == "self.experts.activation_name"
    assert arguments["experts_activation_init"] == {
        "cls": "Qwen3OmniMoeThinkerTextExperts",
        "config_attr": "hidden_act",
    }


def test_a_thinker_output_built_with_its_router_logits_needs_no_patch_for_them() -> None:
    """transformers 5.25's Qwen3-Omni-MoE thinker hands its output the router logits (5.16's left them out)."""
    assert omni("qwen3_omni_moe").router_logits is None
    assert "router_logits" not in fit("qwen3_omni_moe").arguments["causal_lm"]
    assert omni("qwen2_5_omni").router_logits is None


def test_an_audio_model_without_a_thinker_is_refused_as_not_qwen_omni_like() -> None:
    for model in ("moshi", "phi4_multimodal"):
        reasons = [f.reason for f in fit(model).refusals if f.structure == "omni"]
        assert reasons == ["not Qwen-Omni-like: no class holds a thinker (self.thinker)"], model


def test_an_audio_model_that_is_neither_omni_nor_a_composed_audio_model_names_both_differences() -> None:
    reasons = [f.reason for f in fit("gemma3n").refusals if f.structure == "omni"]
    assert reasons[0].startswith("differs from the composed audio contract: Gemma3nModel.get_placeholder_mask")
    assert reasons[-1] == "not Qwen-Omni-like: no class holds a thinker (self.thinker)"


def test_a_text_model_has_no_omni_report() -> None:
    assert read_model("qwen3").omni is None
