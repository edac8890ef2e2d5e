"""The parity suite every Omni model runs (docs/adding-a-model.md, "Omni"), declared once per model; thinker only.

Builds on the VLM suite (``modelgraft.models.testing.vlm_suite``): an :class:`OmniModel` is a :class:`VlmModel` whose
processor also takes audio (Whisper's feature extractor, built locally: ``omni_processor``), whose tiny config also
sizes the audio tower, and whose batches hold an image, a 2-frame video and short audio clips. The VLM suite's tests
run on those batches against upstream's thinker (logits ``torch.equal``, loss and gradients in fp32 and bf16, each
slot's reference kernel bound alone with the call counter, checkpoints both ways, the vision ``dummy_forward``, the
module tree); this suite adds or replaces what Omni does differently:

- the position-id function against upstream's ``get_rope_index`` with audio, with ``use_audio_in_video``, on
  text-only samples without an attention mask (upstream's text-only branch needs one; the function does not), and
  per document of a packed row of every kind of sample; the VLM suite's packed row through the model holds an
  audio and an image document (their clips padded to the longest);
- the audio tower's ``dummy_forward``;
- the top-level class: built without the talker and token2wav, generation and audio output refused, and a checkpoint
  of the whole upstream model, speech side included, loaded strictly (the speech keys dropped, the thinker's weights
  equal, a missing thinker weight named);
- the module has none of the speech classes.

Upstream's thinker takes no ``logits_to_keep``, so the VLM suite's two tests of it do not apply here. The thinker
holds its towers and text decoder in ``model`` (the thinker model, as a VLM's head holds ``<Prefix>Model``), whose
position-id function and metadata step are the thinker's, as the VLM suite checks. The VLM suite's collator-step
checks (``vlm_metadata_checks``) run on the Omni batches.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import PreTrainedConfig, ProcessorMixin

from modelgraft.models.checkpoint import CheckpointError, load_checkpoint
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.registry import MODEL_CONFIG_REGISTRY, MODEL_PROCESSOR_REGISTRY, MODELING_REGISTRY
from modelgraft.models.testing.batches import IGNORE_INDEX
from modelgraft.models.testing.omni_processor import (
    QWEN_OMNI_SPECIAL_TOKENS,
    build_omni_processor,
    synthetic_audio,
    tiny_omni_tokenizer,
    whisper_features,
)
from modelgraft.models.testing.seed import seed_everything
from modelgraft.models.testing.spawned import run_in_spawned_worker
from modelgraft.models.testing.vlm_metadata_checks import metadata_keys, same_value
from modelgraft.models.testing.vlm_processor import synthetic_image, synthetic_video
from modelgraft.models.testing.vlm_suite import DTYPES, MAX_PIXELS, MIN_PIXELS, VlmModel, VlmParitySuite
from modelgraft.models.vision_metadata import AUDIO_METADATA_KEYS

__all__ = ["OmniModel", "OmniParitySuite"]

IMAGE = "<|vision_bos|><|IMAGE|><|vision_eos|>"
VIDEO = "<|vision_bos|><|VIDEO|><|vision_eos|>"
AUDIO = "<|audio_bos|><|AUDIO|><|audio_eos|>"

#: A sample: text, images, videos, audio clips.
Row = tuple[str, list[Any], list[Any], list[Any]]


@dataclass(frozen=True)
class OmniModel(VlmModel):
    """A VLM declaration plus the audio tower's sizes and the top-level class that wraps the thinker."""

    audio_config: Mapping[str, Any] = field(default_factory=dict)
    #: The top-level class (thinker, and upstream's speech side) and its config class.
    top_level: str = ""
    top_level_config_class: type[PreTrainedConfig] | None = None
    #: Tiny sizes of upstream's speech side by top-level attribute ("talker", "token2wav" or "code2wav"; the
    #: config key is ``<attribute>_config``), to write a whole-model checkpoint.
    speech: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Upstream classes of the speech side, none of which the generated module may define.
    speech_classes: tuple[str, ...] = ()
    #: The top-level members that only serve audio output, and how their error names what they do.
    refused: Mapping[str, str] = field(
        default_factory=lambda: {
            "generate": "generation",
            "enable_talker": "audio output",
            "load_speakers": "speaker loading",
        }
    )
    #: The thinker config's key for each special token's id (Qwen2.5-Omni's ``*_token_index``).
    token_id_keys: Mapping[str, str] = field(
        default_factory=lambda: {
            "image_token": "image_token_index",
            "video_token": "video_token_index",
            "audio_token": "audio_token_index",
            "vision_bos_token": "vision_start_token_id",
            "vision_eos_token": "vision_end_token_id",
            "audio_bos_token": "audio_start_token_id",
            "audio_eos_token": "audio_end_token_id",
        }
    )
    #: Lengths of the sample clips (the audio row, the mixed row, the audio-in-video row) and the seconds the
    #: feature extractor pads every clip to.
    clip_seconds: tuple[float, float, float] = (0.3, 0.2, 0.3)
    audio_padding_seconds: int = 1
    #: Attribute path of the audio tower from the thinker (the vision tower's is the VLM suite's ``model.visual``).
    audio_attr: str = "model.audio_tower"
    guarded: tuple[str, ...] = (
        "rms_norm",
        "layer_norm",
        "glu_activation",
        "activation",
        "rope",
        "rope_vision",
        "causal_lm_loss",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("audio_config", "speech", "refused", "token_id_keys"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @cached_property
    def tokenizer(self) -> Any:
        return tiny_omni_tokenizer()

    def processor(self) -> ProcessorMixin:
        """The model's own processor over the tiny tokenizer, the PIL image processor and Whisper's features."""
        vision = self.vision_config
        image_processor = self.image_processor_class(
            patch_size=vision["patch_size"],
            merge_size=vision["spatial_merge_size"],
            temporal_patch_size=vision["temporal_patch_size"],
            min_pixels=MIN_PIXELS,
            max_pixels=MAX_PIXELS,
        )
        features = whisper_features(self.audio_config["num_mel_bins"], seconds=self.audio_padding_seconds)
        return build_omni_processor(self.processor_class, image_processor, features, self.tokenizer)

    def config(self, **overrides: Any) -> PreTrainedConfig:
        """The tiny thinker config: fp32, eager attention, the tokenizer's vocabulary and special-token ids."""
        ids = {self.token_id_keys[name]: self.token_id(token) for name, token in QWEN_OMNI_SPECIAL_TOKENS.items()}
        text = {"vocab_size": len(self.tokenizer), "pad_token_id": 0, "bos_token_id": None, "eos_token_id": 2}
        return self.config_class(
            **{
                "text_config": {**text, "attention_dropout": 0.0, **self.text_config},
                "vision_config": dict(self.vision_config),
                "audio_config": dict(self.audio_config),
                **ids,
                "attn_implementation": "eager",
                **self.sizes,
                **overrides,
            }
        )

    def whole_config(self, **overrides: Any) -> PreTrainedConfig:
        """The top-level config over :meth:`config`'s thinker, with the tiny speech side and audio output on."""
        assert self.top_level_config_class is not None
        return self.top_level_config_class(
            thinker_config=self.config().to_dict(),
            **{f"{name}_config": dict(sizes) for name, sizes in self.speech.items()},
            enable_audio_output=True,
            **overrides,
        )

    # -- batches through the processor ---------------------------------------------------------------
    def omni_batch(self, rows: list[Row], *, labels: bool = True, use_audio_in_video: bool = False) -> dict[str, Any]:
        """The processor's tensors for ``rows``, padded as the processor pads, with labels.

        Labels ignore padding and every placeholder the processor expanded (what a trainer does). The video
        metadata the processor returns is dropped: the model takes ``video_second_per_grid`` instead. With
        ``use_audio_in_video`` each row's clips are the audio tracks of its videos, in order, handed to the
        processor as already decoded (``load_audio_from_video`` with ``audio_from_video_indices``).
        """
        flat = [[item for row in rows for item in row[i]] for i in (1, 2, 3)]
        tracks: dict[str, Any] = {}
        if use_audio_in_video:
            offsets = [sum(len(row[2]) for row in rows[:index]) for index in range(len(rows))]
            indices = [offset + clip for offset, row in zip(offsets, rows, strict=True) for clip in range(len(row[3]))]
            tracks = {"load_audio_from_video": True, "audio_from_video_indices": indices}
        features = self.processor()(
            text=[row[0] for row in rows],
            images=flat[0] or None,
            videos=flat[1] or None,
            audio=flat[2] or None,
            return_tensors="pt",
            padding=True,
            **tracks,
        )
        batch = {name: value for name, value in features.items() if name != "video_metadata"}
        if use_audio_in_video:
            batch["use_audio_in_video"] = True
        if labels:
            placeholders = [
                self.token_id(QWEN_OMNI_SPECIAL_TOKENS[name]) for name in ("image_token", "video_token", "audio_token")
            ]
            ignored = (batch["attention_mask"] == 0) | torch.isin(batch["input_ids"], torch.tensor(placeholders))
            batch["labels"] = batch["input_ids"].masked_fill(ignored, IGNORE_INDEX)
        return batch

    def batch(self, rows: list[tuple[str, list[Any], list[Any]]], *, labels: bool = True) -> dict[str, Any]:
        return self.omni_batch([(text, images, videos, []) for text, images, videos in rows], labels=labels)

    def sample_rows(self) -> dict[str, Row]:
        """One sample of each kind, by name."""
        audio, mixed, _ = self.clip_seconds
        return {
            "text-only": ("w7 w8 w9", [], [], []),
            "image": (f"w1 w2 {IMAGE} w3 w4", [synthetic_image(16, 24, seed=1)], [], []),
            "video": (f"w5 {VIDEO} w6", [], [synthetic_video(16, 16, seed=2)], []),
            "audio": (f"w13 {AUDIO} w14", [], [], [synthetic_audio(audio, seed=7)]),
            "mixed": (
                f"w10 {IMAGE} w11 {AUDIO} {VIDEO} w12",
                [synthetic_image(8, 16, seed=3)],
                [synthetic_video(8, 8, seed=4)],
                [synthetic_audio(mixed, seed=8)],
            ),
        }

    def multimodal_batch(self, *, labels: bool = True) -> dict[str, Any]:
        """An image row, a 2-frame video row, a padded text-only row, an audio row, and a row with all three."""
        rows = self.sample_rows()
        return self.omni_batch(
            [rows[name] for name in ("image", "video", "text-only", "audio", "mixed")], labels=labels
        )

    def some_rows_with_images_batch(self) -> dict[str, Any]:
        """Images in the first and third rows only (the Omni placeholders)."""
        return self.batch(
            [
                (f"w1 {IMAGE} w2", [synthetic_image(16, 24, seed=5)], []),
                ("w3 w4 w5 w6 w7", [], []),
                (f"w8 w9 {IMAGE}", [synthetic_image(16, 16, seed=6)], []),
                ("w10 w11", [], []),
            ]
        )

    def audio_in_video_row(self) -> Row:
        """A 2-frame video with its audio track, for ``use_audio_in_video``."""
        return (
            f"w1 {VIDEO} w2",
            [],
            [synthetic_video(16, 16, seed=5)],
            [synthetic_audio(self.clip_seconds[2], seed=9)],
        )

    def audio_in_video_batch(self, *, labels: bool = True) -> dict[str, Any]:
        """A 2-frame video whose audio track is interleaved with it (``use_audio_in_video``), and a text-only row."""
        rows: list[Row] = [self.audio_in_video_row(), ("w3 w4 w5", [], [], [])]
        return self.omni_batch(rows, labels=labels, use_audio_in_video=True)


def _rope_index_inputs(batch: Mapping[str, Any], *, attention_mask: bool = True) -> dict[str, Any]:
    """get_rope_index's arguments for a processor batch (the audio lengths from the feature mask)."""
    inputs: dict[str, Any] = {"input_ids": batch["input_ids"]}
    if attention_mask:
        inputs["attention_mask"] = batch["attention_mask"]
    for ours, theirs in (
        ("image_grid_thw", "image_grid_thw"),
        ("video_grid_thw", "video_grid_thw"),
        ("second_per_grids", "video_second_per_grid"),
    ):
        if theirs in batch:
            inputs[ours] = batch[theirs]
    if "feature_attention_mask" in batch:
        inputs["audio_seqlens"] = batch["feature_attention_mask"].sum(-1)
    if batch.get("use_audio_in_video"):
        inputs["use_audio_in_video"] = True
    return inputs


def _run_in_worker(payload: bytes) -> tuple[torch.Tensor, torch.Tensor]:
    """In a spawned process: unpickle the position-id function and its inputs, return its result."""
    func, inputs = pickle.loads(payload)
    return func(**inputs)


def _equal(actual: tuple[torch.Tensor, ...], expected: tuple[torch.Tensor, ...]) -> bool:
    return all(torch.equal(a, e) for a, e in zip(actual, expected, strict=True))


def _noisy_state(model: torch.nn.Module) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(0.02 * torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype))
    return model.eval()


class OmniParitySuite(VlmParitySuite):
    """Generated vs upstream ``transformers`` for one Omni thinker and its top-level class; subclasses set ``model``."""

    model: Any  # OmniModel

    # Upstream's thinker takes no logits_to_keep (its forward has no such parameter): nothing to compare.
    test_chunked_loss_sees_only_the_positions_logits_to_keep_keeps = None
    test_logits_to_keep_selects_the_same_positions_as_upstream = None
    # Packed rows: every kind of sample, audio and audio inside a video included; through the model, an audio
    # document and an image document, with the clips' features and feature masks concatenated as the pixels are.
    packed_kinds = ("text-only", "image", "video", "audio", "mixed", "audio-in-video")
    packed_pair = ("audio", "image")
    packed_inputs = (
        "input_features",
        "feature_attention_mask",
        "pixel_values",
        "pixel_values_videos",
        "image_grid_thw",
        "video_grid_thw",
        "video_second_per_grid",
    )

    def _rope_index_arguments(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        return _rope_index_inputs(batch)

    def _documents(self, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
        """One sample of each of ``kinds``, each through the processor alone (no padding to trim); the
        ``audio-in-video`` sample with ``use_audio_in_video``."""
        rows = {**self.model.sample_rows(), "audio-in-video": self.model.audio_in_video_row()}
        return [
            self.model.omni_batch([rows[kind]], labels=False, use_audio_in_video=kind == "audio-in-video")
            for kind in kinds
        ]

    def _packed(self, backend: str, documents: list[dict[str, Any]]) -> dict[str, Any]:
        """The VLM suite's packed row, each document's clips first padded to the longest clip's frames (the
        feature mask marks the frames the audio tower reads, so the padding is read by nothing)."""
        frames = max((doc["input_features"].shape[-1] for doc in documents if "input_features" in doc), default=0)
        padded = []
        for doc in documents:
            doc = dict(doc)
            for name in ("input_features", "feature_attention_mask"):
                if name in doc:
                    doc[name] = torch.nn.functional.pad(doc[name], (0, frames - doc[name].shape[-1]))
            padded.append(doc)
        return super()._packed(backend, padded)

    def _long_video_batch(self) -> dict[str, Any]:
        """An image row and a 6-frame video (3 temporal patches), with the Omni placeholders."""
        return self.model.batch(
            [
                (f"w1 {IMAGE} w2", [synthetic_image(16, 24, seed=7)], []),
                (f"w3 {VIDEO} w4 w5", [], [synthetic_video(16, 8, frames=6, seed=8)]),
            ]
        )

    # -- the collator step: audio metadata too --------------------------------------------------------
    def _audio_keys(self) -> set[str]:
        """What upstream's audio tower of this model takes precomputed through its thinker."""
        upstream = get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)
        return set(AUDIO_METADATA_KEYS[upstream.__module__])

    def test_metadata_step_adds_the_vision_keys_of_the_modalities_in_the_batch(self, backend: str) -> None:
        """The vision keys of the modalities present, and the audio keys where the batch has clips."""
        step = self._collate_func(backend)
        batch = self.model.multimodal_batch()
        collated = step(batch)
        assert set(collated) - set(batch) == metadata_keys("image", "video") | self._audio_keys()
        assert all(same_value(collated[key], value) for key, value in batch.items())
        images_only = self.model.some_rows_with_images_batch()
        assert set(step(images_only)) - set(images_only) == metadata_keys("image")
        text_only = self.model.text_only_batch()
        assert set(step(text_only)) == set(text_only)

    def test_model_fed_the_metadata_gives_the_same_step_on_audio_in_video(self, backend: str) -> None:
        self._assert_same_step(backend, self.model.audio_in_video_batch())

    def test_model_reads_the_precomputed_audio_metadata(self, backend: str) -> None:
        """Wrong audio metadata changes the logits: the equal steps are the metadata's doing, not keys ignored."""
        batch = self.model.multimodal_batch(labels=False)
        seed_everything(0)
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend).eval()
        collated = model.get_metadata_collate_func()(batch)
        wrong = {
            "padded_feature": torch.zeros_like(collated["padded_feature"]),
            "valid_indices": collated["valid_indices"].flip(0),
        }
        if "pool_indices" in collated:
            wrong["pool_indices"] = collated["pool_indices"].flip(0)
        with torch.no_grad():
            expected = model(**collated).logits
            for key, value in wrong.items():
                assert not torch.equal(model(**{**collated, key: value}).logits, expected), f"{key} unread"

    # -- the processor ----------------------------------------------------------------------------
    def test_processor_expands_an_image_and_a_two_frame_video_into_their_placeholders(self) -> None:
        batch = self.model.multimodal_batch()
        merge = self.model.vision_config["spatial_merge_size"]
        image_grids, video_grids = batch["image_grid_thw"], batch["video_grid_thw"]
        assert video_grids[:, 0].tolist() == [1, 1]  # 2 frames: one temporal patch
        ids = batch["input_ids"]
        assert int((ids == self.model.token_id("<|IMAGE|>")).sum()) == int(image_grids.prod(-1).sum()) // merge**2
        assert int((ids == self.model.token_id("<|VIDEO|>")).sum()) == int(video_grids.prod(-1).sum()) // merge**2
        assert batch["pixel_values_videos"].shape[0] == int(video_grids.prod(-1).sum())

    def test_processor_expands_each_audio_clip_into_its_encoder_length(self) -> None:
        """One placeholder per feature upstream's audio tower gives the clips (padded, of different lengths)."""
        batch = self.model.multimodal_batch()
        mask = batch["feature_attention_mask"]
        lengths = mask.sum(-1).tolist()
        assert len(set(lengths)) == 2 and min(lengths) < mask.shape[1]  # two clip lengths, the shorter one padded
        seed_everything(0)
        upstream = get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)(self.model.config())
        with torch.no_grad():
            features = upstream.get_audio_features(batch["input_features"], mask).last_hidden_state
        assert int((batch["input_ids"] == self.model.token_id("<|AUDIO|>")).sum()) == features.shape[0]

    # -- eager parity with audio ----------------------------------------------------------------------
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_audio_in_video_batch_matches_upstream(self, backend: str, dtype: torch.dtype) -> None:
        self._parity(backend, self.model.audio_in_video_batch(), dtype=dtype)

    def _other_towers(self) -> tuple[str, ...]:
        return (self.model.audio_attr,)

    # -- the audio dummy_forward ----------------------------------------------------------------------
    def _audio_step(
        self, backend: str, batch: Mapping[str, Any], *, dummy: str = "", dtype: torch.dtype = torch.float32
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
        """One training step of the thinker on ``batch``, plus ``<dummy>.dummy_forward()`` when named."""
        seed_everything(0)
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend).to(dtype).train()
        loss = model(**batch).loss
        if dummy:
            loss = loss + attrgetter(dummy)(model).dummy_forward()
        loss.backward()
        return loss.detach(), {name: param.grad for name, param in model.named_parameters()}

    def test_audio_dummy_forward_adds_exactly_zero_to_the_loss_and_its_gradients(self, backend: str) -> None:
        batch = self.model.text_only_batch()
        plain_loss, plain_grads = self._audio_step(backend, batch)
        loss, grads = self._audio_step(backend, batch, dummy=self.model.audio_attr)
        assert torch.equal(loss, plain_loss)
        for name, grad in plain_grads.items():
            if grad is not None:
                assert torch.equal(grads[name], grad), name

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_audio_dummy_forward_reaches_every_audio_parameter_an_audio_batch_reaches(
        self, backend: str, dtype: torch.dtype
    ) -> None:
        """The parameters a real audio batch trains, and only those, get a gradient from dummy_forward."""
        prefix = self.model.audio_attr + "."
        _, plain = self._audio_step(backend, self.model.text_only_batch(), dtype=dtype)
        _, dummy = self._audio_step(backend, self.model.text_only_batch(), dummy=self.model.audio_attr, dtype=dtype)
        _, real = self._audio_step(backend, self.model.multimodal_batch(), dtype=dtype)
        audio = [name for name in real if name.startswith(prefix)]
        assert audio and all(plain[name] is None for name in audio)  # without it, none would have one
        reached = {name for name in audio if real[name] is not None}
        assert len(reached) > len(audio) // 2
        assert {name for name in audio if dummy[name] is not None} == reached

    # -- position ids ---------------------------------------------------------------------------
    def _upstream_rope_index(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        upstream = get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)(self.model.config())
        return upstream.get_rope_index(**_rope_index_inputs(batch))

    @pytest.mark.parametrize("sample", ["text-only", "image", "video", "audio", "mixed"])
    def test_position_id_func_equals_upstream_get_rope_index(self, backend: str, sample: str) -> None:
        batch = self.model.omni_batch([self.model.sample_rows()[sample]], labels=False)
        expected = self._upstream_rope_index(batch)
        assert _equal(self._position_id_func(backend)(**_rope_index_inputs(batch)), expected)

    def test_position_id_func_of_a_batch_equals_upstream_get_rope_index(self, backend: str) -> None:
        batch = self.model.multimodal_batch(labels=False)
        expected = self._upstream_rope_index(batch)
        assert _equal(self._position_id_func(backend)(**_rope_index_inputs(batch)), expected)

    def test_position_id_func_with_audio_in_video_equals_upstream_get_rope_index(self, backend: str) -> None:
        batch = self.model.audio_in_video_batch(labels=False)
        expected = self._upstream_rope_index(batch)
        assert _equal(self._position_id_func(backend)(**_rope_index_inputs(batch)), expected)

    def test_position_id_func_takes_an_attention_mask_by_attention_type(self, backend: str) -> None:
        batch = self.model.multimodal_batch(labels=False)
        expected = self._upstream_rope_index(batch)
        inputs = {**_rope_index_inputs(batch), "attention_mask": {"full_attention": batch["attention_mask"]}}
        assert _equal(self._position_id_func(backend)(**inputs), expected)

    def test_position_id_func_of_text_without_an_attention_mask_counts_every_token(self, backend: str) -> None:
        """Upstream's text-only branch fails without a mask; the function gives the positions of an all-ones one."""
        batch = self.model.omni_batch([self.model.sample_rows()["text-only"]], labels=False)
        inputs = _rope_index_inputs(batch, attention_mask=False)
        with pytest.raises(AttributeError):
            get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)(
                self.model.config()
            ).get_rope_index(**inputs)
        positions, deltas = self._position_id_func(backend)(**inputs)
        length = batch["input_ids"].shape[1]
        assert torch.equal(positions, torch.arange(length).expand(3, 1, length))
        assert torch.equal(deltas, torch.zeros(1, 1, dtype=deltas.dtype))

    def test_position_id_func_of_a_multimodal_sample_without_an_attention_mask_counts_every_token(
        self, backend: str
    ) -> None:
        """Upstream's positions with an all-ones mask (some upstream versions of the multimodal branch need one)."""
        batch = self.model.omni_batch([self.model.sample_rows()["mixed"]], labels=False)
        inputs = _rope_index_inputs(batch, attention_mask=False)
        upstream = get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)(self.model.config())
        expected = upstream.get_rope_index(**inputs, attention_mask=torch.ones_like(batch["input_ids"]))
        assert _equal(self._position_id_func(backend)(**inputs), expected)

    def test_position_id_func_pickles_and_runs_in_a_spawned_worker(self, backend: str) -> None:
        batch = self.model.multimodal_batch(labels=False)
        payload = pickle.dumps((self._position_id_func(backend), _rope_index_inputs(batch)))
        actual = run_in_spawned_worker(_run_in_worker, payload)
        assert _equal(actual, self._upstream_rope_index(batch))

    # -- the top-level class: thinker only --------------------------------------------------------------
    def _top_level(self, backend: str) -> type:
        return get_model_class(self.model.model_type, self.model.top_level, backend)

    def test_registry_serves_the_top_level_model_type_with_upstreams_config_and_processor(self, backend: str) -> None:
        """The whole model's model_type (what a hub checkpoint's config names) builds the generated top-level class."""
        config_class = self.model.top_level_config_class
        assert MODEL_CONFIG_REGISTRY[config_class.model_type] is config_class
        assert MODEL_PROCESSOR_REGISTRY[config_class.model_type] is self.model.processor_class
        model = build_model(self.model.whole_config(), architecture=self.model.top_level, backend=backend)
        assert type(model).__module__ == MODELING_REGISTRY.module_path(config_class.model_type, backend)
        assert type(model) is self._top_level(backend)

    def test_the_module_defines_no_speech_class(self, backend: str) -> None:
        module = MODELING_REGISTRY.get_module(self.model.model_type, backend)
        assert [name for name in self.model.speech_classes if hasattr(module, name)] == []

    def test_top_level_model_builds_the_thinker_alone_with_audio_output_configured(self, backend: str) -> None:
        model = self._top_level(backend)(self.model.whole_config())
        assert [name for name, _ in model.named_children()] == ["thinker"]
        assert type(model.thinker) is get_model_class(self.model.model_type, self.model.causal_lm, backend)
        assert model.has_talker is False

    def test_top_level_refuses_what_only_audio_output_needs(self, backend: str) -> None:
        model = self._top_level(backend)(self.model.whole_config())
        assert self.model.refused
        for member, what in self.model.refused.items():
            with pytest.raises(NotImplementedError, match=f"{what} is refused.*training modeling of the thinker only"):
                getattr(model, member)(torch.zeros(1, 3, dtype=torch.long))

    def _whole_upstream(self) -> torch.nn.Module:
        seed_everything(0)
        upstream_cls = get_model_class(self.model.model_type, self.model.top_level, use_hf=True)
        return _noisy_state(upstream_cls(self.model.whole_config()))

    def _assert_thinker_equal(self, model: torch.nn.Module, upstream: torch.nn.Module) -> None:
        ours, theirs = model.state_dict(), upstream.state_dict()
        thinker = {key for key in theirs if key.startswith("thinker.")}
        assert set(ours) == thinker
        assert [key for key in thinker if not torch.equal(ours[key], theirs[key])] == []

    def test_whole_upstream_checkpoint_loads_strictly_without_its_speech_weights(
        self, backend: str, tmp_path: Path
    ) -> None:
        upstream = self._whole_upstream()
        upstream.save_pretrained(tmp_path)
        saved = load_file(str(tmp_path / "model.safetensors"))
        assert all(any(key.startswith(f"{name}.") for key in saved) for name in self.model.speech), list(saved)
        model, info = self._top_level(backend).from_pretrained(
            tmp_path, output_loading_info=True, attn_implementation="eager"
        )
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        self._assert_thinker_equal(model, upstream)

    def test_whole_upstream_checkpoint_loads_through_the_registered_converter(
        self, backend: str, tmp_path: Path
    ) -> None:
        """The hub keeps the thinker's names from before its thinker model (``thinker.visual``, ``thinker.model.layers``);
        ``load_checkpoint`` reads them through the converter the model's package registers, speech side dropped."""
        upstream = self._whole_upstream()
        upstream.save_pretrained(tmp_path)
        assert any(key.startswith("thinker.visual.") for key in load_file(str(tmp_path / "model.safetensors")))
        seed_everything(1)  # other initial weights than the source: everything must come from the checkpoint
        model = self._top_level(backend)(self.model.whole_config()).eval()
        load_checkpoint(model, tmp_path)
        self._assert_thinker_equal(model, upstream)

    def test_whole_upstream_checkpoint_missing_a_thinker_weight_fails_naming_it(
        self, backend: str, tmp_path: Path
    ) -> None:
        upstream = self._whole_upstream()
        upstream.save_pretrained(tmp_path)
        file = tmp_path / "model.safetensors"
        tensors = load_file(str(file))
        dropped = min(key for key in tensors if key.startswith("thinker.") and key.endswith("norm.weight"))
        del tensors[dropped]
        save_file(tensors, str(file), metadata={"format": "pt"})
        # Upstream saves the thinker in the hub layout (``thinker.audio_tower...``, ``thinker.model.layers...``);
        # the error names the model's key (``thinker.model.audio_tower...``, ``thinker.model.language_model...``).
        shared = dropped.removeprefix("thinker.").removeprefix("model.")
        (named,) = [key for key in upstream.state_dict() if key.startswith("thinker.") and key.endswith("." + shared)]
        with pytest.raises(CheckpointError, match="missing from the checkpoint") as raised:
            self._top_level(backend).from_pretrained(tmp_path, attn_implementation="eager")
        assert named in str(raised.value)

    def test_whole_upstream_state_dict_loads_strictly_with_the_speech_keys_dropped(self, backend: str) -> None:
        upstream = self._whole_upstream()
        model = self._top_level(backend)(self.model.whole_config())
        state = upstream.state_dict()
        model.load_state_dict(state, strict=True)
        assert all(any(key.startswith(f"{name}.") for key in state) for name in self.model.speech)  # read, not emptied
        self._assert_thinker_equal(model, upstream)

    def test_whole_upstream_state_dict_missing_a_thinker_weight_fails_naming_it(self, backend: str) -> None:
        state = dict(self._whole_upstream().state_dict())
        dropped = min(key for key in state if key.startswith("thinker.") and key.endswith("norm.weight"))
        del state[dropped]
        model = self._top_level(backend)(self.model.whole_config())
        with pytest.raises(RuntimeError, match="Missing key") as raised:
            model.load_state_dict(state, strict=True)
        assert dropped in str(raised.value)
