"""Gated DeltaNet and short-convolution hybrids are a structure of the dense and MoE categories; other linear mixers
are refused.

The reader keys on the gated delta rule and the mixer class that calls it, never on the causal conv alone; a
short-convolution mixer is a class named for one whose forward reaches both causal convs of the slots' signature.
The fit plans the hybrid recipes' guards for a text-only hybrid and refuses, with the kind, a short convolution
computing its own windows, a Mamba-style state space, lightning attention and Kimi-delta attention. Fit level only:
the copies of one hybrid of each kind are tests/template/test_copy_gated_delta_net.py and
test_copy_short_convolution.py, the others are in the survey's table (docs/scaffolding.md, "How far the scaffold
reaches").
"""

from __future__ import annotations

from functools import cache

import pytest

from modelgraft.generator.recipes.fit import Fit, fit_model
from modelgraft.generator.upstream.index import UpstreamSources
from modelgraft.generator.upstream.reader import modeling_module
from modelgraft.generator.upstream.structure import ModelStructure

from .readings import read_model

#: The slots the mixer's guards take, for every Gated DeltaNet model of transformers 5.25.
MIXER_SLOTS = (
    "rms_norm_gated",
    "causal_conv1d",
    "causal_conv1d_update",
    "chunk_gated_delta_rule",
    "recurrent_gated_delta_rule",
)

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts


@cache
def structure(model: str) -> ModelStructure:
    return read_model(model)


def fit(model: str) -> Fit:
    return fit_model(structure(model))


def test_the_mixer_is_the_class_that_calls_both_gated_delta_rules_with_the_functions_around_it() -> None:
    mixer = structure("olmo_hybrid").linear_attention
    assert mixer is not None
    assert (mixer.mixer, mixer.chunk, mixer.recurrent) == (
        "OlmoHybridGatedDeltaNet",
        "torch_chunk_gated_delta_rule",
        "torch_recurrent_gated_delta_rule",
    )
    assert (mixer.conv, mixer.conv_update) == ("causal_conv1d_fn", "causal_conv1d_update")
    # 5.25: the forward calls neither conv itself, but causal_conv1d_forward, which calls both.
    assert (mixer.conv_via, mixer.conv_update_via) == (("causal_conv1d_forward",), ("causal_conv1d_forward",))
    assert (mixer.norm, mixer.norm_eps_attr, mixer.norm_activation) == (
        "OlmoHybridRMSNormGated",
        "variance_epsilon",
        "self.activation",
    )


def test_a_mixer_that_hands_cu_seq_lens_q_to_the_delta_rule_is_recorded_as_packed() -> None:
    assert structure("qwen3_next").linear_attention.packed


def test_a_causal_conv_without_a_gated_delta_rule_is_no_gated_delta_net() -> None:
    """GLM-5-Next's module defines causal_conv1d_fn for its Kimi-delta attention: the conv proves nothing."""
    assert "causal_conv1d_fn" in UpstreamSources(None).get(modeling_module("glm5_next")).members
    assert structure("glm5_next").linear_attention is None


@pytest.mark.parametrize(("model", "category"), [("olmo_hybrid", "dense"), ("qwen3_next", "moe")])
def test_a_text_only_hybrid_fits_its_text_category_with_every_mixer_slot_guarded(model: str, category: str) -> None:
    result = fit(model)
    assert not result.refused, result.refusal_message()
    assert result.category == category
    assert set(MIXER_SLOTS) <= set(result.guarded)
    assert result.arguments["gated_delta_net"]["mixer"] == structure(model).linear_attention.mixer


def test_a_model_without_a_gated_delta_net_records_no_mixer_answer() -> None:
    """Other scaffolds' answers stay as they were: the key exists only for a hybrid."""
    assert "gated_delta_net" not in fit("mistral").arguments


def test_a_hybrid_with_a_vision_tower_is_its_vlm_category_not_out_of_category() -> None:
    assert structure("qwen3_5").category == "vlm"


def test_a_hybrid_with_a_second_convolutional_state_is_refused_for_it() -> None:
    """qwen4_exp's per-layer embeddings run a dilated short conv with a cached state of its own."""
    result = fit("qwen4_exp")
    assert result.refused
    assert "Qwen4ExpTextPLELayer.conv1d" in result.refusal_message()


def test_a_short_convolution_mixer_is_read_with_the_convs_it_reaches_through_causal_conv1d_forward() -> None:
    mixer = structure("lfm2").short_convolution
    assert mixer is not None
    assert (mixer.mixer, mixer.conv, mixer.conv_update) == (
        "Lfm2ShortConv",
        "causal_conv1d_fn",
        "causal_conv1d_update",
    )
    assert (mixer.conv_via, mixer.conv_update_via) == (("causal_conv1d_forward",), ("causal_conv1d_forward",))
    assert mixer.packed  # the decoder layer hands the mixer its **kwargs, and they reach causal_conv1d_fn
    assert structure("lfm2").linear_attention is None


def test_a_gated_delta_net_is_no_short_convolution() -> None:
    assert structure("olmo_hybrid").short_convolution is None


@pytest.mark.parametrize(("model", "category"), [("lfm2", "dense"), ("lfm3", "dense"), ("lfm2_moe", "moe")])
def test_a_short_convolution_hybrid_fits_its_text_category_with_both_conv_slots_guarded(
    model: str, category: str
) -> None:
    result = fit(model)
    assert not result.refused, result.refusal_message()
    assert result.category == category
    assert {"causal_conv1d", "causal_conv1d_update"} <= set(result.guarded)
    assert not {"chunk_gated_delta_rule", "recurrent_gated_delta_rule", "rms_norm_gated"} & set(result.guarded)
    assert result.arguments["short_convolution"]["mixer"] == structure(model).short_convolution.mixer
    assert "gated_delta_net" not in result.arguments


def test_a_second_short_convolution_computing_its_own_windows_is_refused_naming_it() -> None:
    """inkling2's static short conv reaches the convs; its dynamic one, for keys and values, unfolds windows itself."""
    assert structure("inkling2").category == "out_of_category"
    result = fit("inkling2")
    assert result.refused
    assert "Inkling2DynamicShortConvolution" in result.refusal_message()
    assert "runs no causal conv1d of the slots' signature" in result.refusal_message()


@pytest.mark.parametrize(
    ("model", "kind"),
    [
        ("jamba", "a Mamba-style state space"),
        ("minimax", "lightning attention"),
        ("glm5_next", "Kimi-delta attention"),
    ],
    ids=["state-space", "lightning", "kimi-delta"],
)
def test_other_linear_mixers_are_refused_naming_their_kind(model: str, kind: str) -> None:
    result = fit(model)
    assert result.refused and result.category == "out_of_category"
    assert kind in result.refusal_message()
