"""The Omni thinker converter: the hub's names of a thinker's weights -> the thinker model's, experts fused; and back.

transformers 5.25's Qwen-Omni thinker holds its towers and text decoder in a thinker model (``model.audio_tower``,
``model.visual``, ``model.language_model``); the hub checkpoints keep the earlier names, as upstream's
``save_pretrained`` writes them. The parity suites load real upstream checkpoints through the converter; these
tests hold its renames, its expert-parallel hooks and its way back to the hub's names.
"""

from __future__ import annotations

import pytest
import torch

from modelgraft.models.converters.moe import FusedExpertsConverter
from modelgraft.models.converters.omni import OmniThinkerConverter, hub_key, model_key, thinker_converter

E, H, I = 3, 4, 2

#: (hub name, the modeling's name), for a whole-model checkpoint and a checkpoint of the thinker alone.
RENAMED = [
    ("thinker.audio_tower.conv1.weight", "thinker.model.audio_tower.conv1.weight"),
    ("thinker.visual.blocks.0.attn.qkv.weight", "thinker.model.visual.blocks.0.attn.qkv.weight"),
    (
        "thinker.model.layers.0.self_attn.q_proj.weight",
        "thinker.model.language_model.layers.0.self_attn.q_proj.weight",
    ),
    ("thinker.model.embed_tokens.weight", "thinker.model.language_model.embed_tokens.weight"),
    ("audio_tower.ln_post.weight", "model.audio_tower.ln_post.weight"),
    ("visual.merger.mlp.0.weight", "model.visual.merger.mlp.0.weight"),
    ("model.norm.weight", "model.language_model.norm.weight"),
]
#: Keys whose names the thinker model did not change.
UNCHANGED = [
    "thinker.lm_head.weight",
    "lm_head.weight",
    "talker.model.layers.0.mlp.experts.0.gate_proj.weight",
    "code2wav.decoder.0.weight",
]


def _converter() -> OmniThinkerConverter:
    experts = FusedExpertsConverter(
        num_experts=E, hidden_size=H, intermediate_size=I, layout="fused", ignore=("talker.", "code2wav.")
    )
    return OmniThinkerConverter(experts)


def _per_expert(prefix: str) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    pieces = {}
    for expert in range(E):
        for proj, shape in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            pieces[f"{prefix}.{expert}.{proj}.weight"] = torch.randn(shape, generator=generator)
    return pieces


@pytest.mark.parametrize(("hub", "model"), RENAMED)
def test_a_hub_name_is_the_thinker_models_and_back(hub: str, model: str) -> None:
    assert model_key(hub) == model and hub_key(model) == hub
    assert model_key(model) == model  # a key already in the modeling's names stays


@pytest.mark.parametrize("key", UNCHANGED)
def test_the_head_and_the_speech_side_keep_their_names(key: str) -> None:
    assert model_key(key) == key and hub_key(key) == key
    assert not _converter().can_handle(key)


def test_a_renamed_key_loads_unchanged_under_its_new_name() -> None:
    converter = _converter()
    tensor = torch.ones(2)
    hub, model = RENAMED[0]
    assert converter.can_handle(hub) and converter.rename(hub) == model
    assert converter.convert(hub, tensor) == [(model, tensor)]


def test_the_hub_experts_fuse_under_the_thinker_models_names() -> None:
    converter = _converter()
    pieces = _per_expert("thinker.model.layers.1.mlp.experts")
    assert all(converter.can_handle(key) and converter.rename(key) is None for key in pieces)
    assert converter.expert_of("thinker.model.layers.1.mlp.experts.2.up_proj.weight") == 2
    out = dict(pair for key, tensor in pieces.items() for pair in converter.convert(key, tensor))
    assert converter.finalize() == []
    fused = "thinker.model.language_model.layers.1.mlp.experts"
    assert set(out) == {f"{fused}.gate_up_proj", f"{fused}.down_proj"}
    gate_up = torch.cat(
        [
            pieces["thinker.model.layers.1.mlp.experts.0.gate_proj.weight"],
            pieces["thinker.model.layers.1.mlp.experts.0.up_proj.weight"],
        ]
    )
    assert torch.equal(out[f"{fused}.gate_up_proj"][0], gate_up)


def test_a_ranks_converter_fuses_only_its_experts() -> None:
    converter = _converter().for_experts(1, 3)
    pieces = _per_expert("model.layers.0.mlp.experts")
    out = dict(pair for key, tensor in pieces.items() for pair in converter.convert(key, tensor))
    assert out["model.language_model.layers.0.mlp.experts.down_proj"].shape == (2, H, I)


def test_export_writes_the_hub_names_one_linear_per_expert() -> None:
    converter = _converter()
    pieces = _per_expert("thinker.model.layers.0.mlp.experts")
    fused = dict(pair for key, tensor in pieces.items() for pair in converter.convert(key, tensor))
    exported = dict(pair for key, tensor in fused.items() for pair in converter.export(key, tensor))
    assert set(exported) == set(pieces)
    assert all(torch.equal(exported[key], pieces[key]) for key in pieces)
    tower = "thinker.model.visual.patch_embed.proj.weight"
    assert converter.export(tower, torch.ones(1))[0][0] == "thinker.visual.patch_embed.proj.weight"


def test_a_dense_thinkers_converter_renames_and_fuses_nothing() -> None:
    """Qwen2.5-Omni's (no experts): every hub name becomes the thinker model's, and every tensor loads as it is."""
    converter = thinker_converter(config=None)
    tensor = torch.ones(2, 2)
    for hub, model in RENAMED:
        assert converter.can_handle(hub) and converter.rename(hub) == model
        assert converter.convert(hub, tensor) == [(model, tensor)]
    assert not any(converter.can_handle(key) for key in UNCHANGED)
    assert converter.expert_of("thinker.model.layers.0.mlp.experts.0.gate_proj.weight") is None
    assert converter.finalize() == []


def test_a_dense_thinkers_converter_exports_the_hub_names() -> None:
    converter = thinker_converter(config=None)
    tensor = torch.ones(2, 2)
    for hub, model in RENAMED:
        assert converter.export(model, tensor) == [(hub, tensor)]
    assert converter.for_experts(0, 1).export(RENAMED[0][1], tensor) == [(RENAMED[0][0], tensor)]
