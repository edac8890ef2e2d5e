"""Tiny configs, processors and batches of composed audio LMs, derived from their own classes, run upstream's models.

Each model below is built from the package's own classes (``audio_lm_classes``); nothing about it is spelt out
here, so these are facts of the pinned transformers: which composed audio LMs the derivation feeds, and that
upstream's ``<Prefix>ForConditionalGeneration`` takes every batch layout and trains its audio side on it.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from transformers import PreTrainedConfig, PreTrainedModel

from modelgraft.models.testing.audio_lm_batches import LAYOUTS, AudioLmBatches, audio_lm_classes
from modelgraft.models.testing.batches import IGNORE_INDEX

pytestmark = pytest.mark.upstream_facts

#: The composed audio LMs of transformers 5.25 the derivation feeds offline.
MODELS = ("glmasr", "audioflamingo3", "qwen3_asr", "moss_transcribe_diarize", "musicflamingo")


@functools.cache
def _declaration(model: str) -> tuple[AudioLmBatches, type[PreTrainedModel]]:
    config_class, processor_class, head = audio_lm_classes(model)
    return AudioLmBatches(config_class, processor_class), head


def _upstream(model: str) -> tuple[PreTrainedModel, PreTrainedConfig, AudioLmBatches]:
    declaration, head = _declaration(model)
    config = declaration.config()
    torch.manual_seed(0)
    return head(config), config, declaration


def _placeholders(batch: dict[str, torch.Tensor], config: PreTrainedConfig) -> torch.Tensor:
    return (batch["input_ids"] == config.audio_token_id).sum(-1)


@pytest.mark.parametrize("model", MODELS)
def test_the_package_exports_one_composed_config_its_processor_and_its_head(model: str) -> None:
    config_class, processor_class, head = audio_lm_classes(model)
    assert head.config_class is config_class
    assert processor_class.__module__ == f"transformers.models.{model}.processing_{model}"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model", MODELS)
def test_every_layout_gives_a_finite_loss(model: str, layout: str) -> None:
    upstream, _, declaration = _upstream(model)
    loss = upstream(**declaration.batch(layout)).loss
    assert torch.isfinite(loss)


@pytest.mark.parametrize("layout", ["audio", "mixed"])
@pytest.mark.parametrize("model", MODELS)
def test_each_audio_placeholder_receives_one_feature_row(model: str, layout: str) -> None:
    """The model scatters as many audio feature rows as the processor wrote placeholders (it raises otherwise;
    the rows are counted here too)."""
    upstream, config, declaration = _upstream(model)
    batch = declaration.batch(layout)
    rows: list[int] = []
    get_audio_features = upstream.model.get_audio_features

    def counted(*args: Any, **kwargs: Any) -> Any:
        output = get_audio_features(*args, **kwargs)
        rows.append(output.pooler_output.shape[0])
        return output

    upstream.model.get_audio_features = counted
    with torch.no_grad():
        upstream(**batch)
    assert rows == [int(_placeholders(batch, config).sum())]
    assert rows[0] > 0


@pytest.mark.parametrize("model", MODELS)
def test_the_audio_rows_hold_clips_of_different_lengths(model: str) -> None:
    _, config, declaration = _upstream(model)
    per_row = _placeholders(declaration.batch("audio"), config)
    assert len(per_row) == 2 and 0 < per_row[0] < per_row[1]


@pytest.mark.parametrize("model", MODELS)
def test_the_text_layout_holds_no_audio(model: str) -> None:
    _, config, declaration = _upstream(model)
    batch = declaration.batch("text")
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["input_ids"].shape[0] == 2 and not _placeholders(batch, config).any()


@pytest.mark.parametrize("model", MODELS)
def test_the_mixed_layout_is_one_row_with_a_clip_beside_a_text_only_row(model: str) -> None:
    _, config, declaration = _upstream(model)
    batch = declaration.batch("mixed")
    assert (_placeholders(batch, config) > 0).tolist() == [True, False]
    assert batch["input_features"].shape[0] == 1


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model", MODELS)
def test_labels_are_the_ids_with_padding_and_placeholders_ignored(model: str, layout: str) -> None:
    _, config, declaration = _upstream(model)
    batch = declaration.batch(layout)
    ignored = (batch["attention_mask"] == 0) | (batch["input_ids"] == config.audio_token_id)
    assert torch.equal(batch["labels"], batch["input_ids"].masked_fill(ignored, IGNORE_INDEX))
    assert (batch["attention_mask"] == 0).any()  # the rows differ in length, so one is padded


@pytest.mark.parametrize("model", MODELS)
def test_backward_on_audio_rows_reaches_every_audio_tower_and_projector_parameter(model: str) -> None:
    """Every trainable parameter of both gets a non-zero gradient (upstream freezes Whisper-style position tables)."""
    upstream, _, declaration = _upstream(model)
    upstream(**declaration.batch("audio")).loss.backward()
    for part in (upstream.model.audio_tower, upstream.model.multi_modal_projector):
        trainable = {name: p for name, p in part.named_parameters() if p.requires_grad}
        assert trainable
        missing = [name for name, p in trainable.items() if p.grad is None or not p.grad.any()]
        assert missing == []


@pytest.mark.parametrize("model", MODELS)
def test_batches_are_the_same_from_a_fresh_declaration(model: str) -> None:
    config_class, processor_class, _ = audio_lm_classes(model)
    cached, _ = _declaration(model)
    fresh = AudioLmBatches(config_class, processor_class)
    for layout in LAYOUTS:
        first, second = cached.batch(layout), fresh.batch(layout)
        assert first.keys() == second.keys()
        assert all(torch.equal(first[key], second[key]) for key in first)


@pytest.mark.parametrize("model", MODELS)
def test_the_placeholder_id_is_the_id_of_the_token_the_processor_writes(model: str) -> None:
    _, config, declaration = _upstream(model)
    processor = declaration.processor()
    assert config.audio_token_id == processor.tokenizer.convert_tokens_to_ids(processor.audio_token)
    assert config.audio_token_id != processor.tokenizer.unk_token_id


@pytest.mark.parametrize("model", MODELS)
def test_every_special_id_of_the_config_is_in_the_tiny_vocabulary(model: str) -> None:
    _, config, _ = _upstream(model)
    for sub in (config, config.text_config):
        for name, value in sub.to_dict().items():
            if name.endswith("_token_id") and value is not None:
                ids = value if isinstance(value, list) else [value]
                assert all(0 <= i < config.text_config.vocab_size for i in ids), (name, value)


@pytest.mark.parametrize("model", MODELS)
def test_the_feature_extractor_gives_the_tower_its_mel_bins(model: str) -> None:
    _, config, declaration = _upstream(model)
    batch = declaration.batch("audio")
    assert batch["input_features"].shape[1] == config.audio_config.num_mel_bins
    assert declaration.processor().feature_extractor.feature_size == config.audio_config.num_mel_bins


@pytest.mark.parametrize("model", MODELS)
def test_the_model_is_fp32_on_eager_attention(model: str) -> None:
    upstream, config, _ = _upstream(model)
    assert {p.dtype for p in upstream.parameters()} == {torch.float32}
    for sub in (config, config.text_config, config.audio_config):
        assert sub._attn_implementation == "eager"


@pytest.mark.parametrize("model", MODELS)
def test_config_returns_a_fresh_copy(model: str) -> None:
    declaration, _ = _declaration(model)
    first = declaration.config()
    first.audio_token_id = -1
    assert declaration.config().audio_token_id != -1


def test_voxtral_is_refused_since_its_processor_writes_audio_placeholders_only_through_mistral_common() -> None:
    """VoxtralProcessor's call refuses text holding its audio token (id 24, whatever the tokenizer holds there):
    audio goes through apply_chat_template on a MistralCommonBackend tokenizer."""
    config_class, processor_class, _ = audio_lm_classes("voxtral")
    with pytest.raises(ValueError, match="is present in the provided text which is not supported by VoxtralProcessor"):
        AudioLmBatches(config_class, processor_class).config()


def test_a_processor_that_needs_a_part_these_rules_cannot_build_is_refused_by_its_name() -> None:
    """Nemotron-3.5-Transcribe's processor takes an ``alignment_tokenizer`` as well."""
    config_class, processor_class, _ = audio_lm_classes("nemotron3_5_transcribe")
    with pytest.raises(TypeError, match="needs alignment_tokenizer"):
        AudioLmBatches(config_class, processor_class).config()
