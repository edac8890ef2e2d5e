"""The VLM declaration a scaffold's tests hold: tiny sizes and special tokens derived from the model's own classes.

A zoo VLM's test file spells out its tiny text and vision sizes and runs on the Qwen-VL family's special tokens
(``modelgraft.models.testing.vlm_suite``). A scaffold (``copier copy``, category ``vlm`` or ``vlm_moe``) is written
for a model no one has sized by hand, so :class:`ScaffoldVlm` derives both from upstream's classes at run time:

- the text sizes from the text config class (``modelgraft.models.testing.tiny``, the rules the text scaffolds
  use), with the multimodal RoPE sections scaled to the tiny rotary width, in upstream's proportions; a
  sub-config the top-level config declares as ``AutoConfig`` (glm46v's) is the class of its default type;
- the vision sizes for the attributes the vision config class declares, each a tiny value the Qwen-VL
  towers accept (patch 4, merge 2, 2 blocks), the tower's output width the text width;
- the special tokens from the config class's ``*_token_id`` fields and the processor's placeholder tokens:
  the image and video placeholders (``processor.image_token``, ``processor.video_token``) and the start and
  end markers around them (Qwen-VL's ``<|vision_start|>``, GLM-4V's ``<|begin_of_image|>``), so the processor
  expands them as upstream's does.

:class:`ScaffoldVlmParitySuite` is the VLM suite with the checks that name Qwen-VL's tokens or both RoPE slots
read from the declaration instead: the processor check uses the model's image placeholder, and the bit-for-bit
RoPE check runs for the RoPE slots the scaffold guards. :class:`ScaffoldVlmMoe` / :class:`ScaffoldVlmMoeParitySuite`
are the same over the VLM-MoE suite.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections import Counter
from collections.abc import Mapping
from functools import cached_property
from types import MappingProxyType
from typing import Any, ClassVar

import pytest
import torch
from transformers import PreTrainedConfig, ProcessorMixin

from modelgraft.models.distributed.launch import spawn
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.processors import build_processor
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.dense_suite import reference_kernels_bound
from modelgraft.models.testing.moe_suite import plan_matches
from modelgraft.models.testing.parity import Tolerance
from modelgraft.models.testing.reference import reference_kernel
from modelgraft.models.testing.seed import seed_everything
from modelgraft.models.testing.tiny import tiny_overrides_for
from modelgraft.models.testing.vlm_metadata_checks import metadata_keys
from modelgraft.models.testing.vlm_moe_suite import VlmMoeModel, VlmMoeParitySuite
from modelgraft.models.testing.vlm_processor import (
    read_tokenizer_attributes,
    synthetic_image,
    synthetic_video,
    tiny_tokenizer,
)
from modelgraft.models.testing.vlm_suite import (
    DTYPES,
    IMAGE,
    MAX_PIXELS,
    MIN_PIXELS,
    VIDEO,
    VlmModel,
    VlmParitySuite,
    _rope_index_inputs,
    module_classes_outside,
)
from modelgraft.models.vision_metadata import GRIDS

__all__ = [
    "MARKER_TOKENS",
    "ImagesOnly",
    "ScaffoldVlm",
    "ScaffoldVlmMoe",
    "ScaffoldVlmMoeParitySuite",
    "ScaffoldVlmParitySuite",
    "tiny_text_sizes",
    "tiny_vision_sizes",
]

#: The start and end markers of the VLM families, by the config attribute holding their id. A config that
#: declares a marker id not listed here cannot be fed by these tests (the declaration raises and says so).
MARKER_TOKENS: Mapping[str, str] = {
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
    "image_start_token_id": "<|begin_of_image|>",
    "image_end_token_id": "<|end_of_image|>",
    "video_start_token_id": "<|begin_of_video|>",
    "video_end_token_id": "<|end_of_video|>",
}

#: Placeholder tokens a processor may take from its tokenizer (``tokenizer.image_token``), by the config
#: attribute holding their id; the processor's own default is used when the tokenizer has none.
PLACEHOLDER_IDS = ("image_token_id", "video_token_id")

#: Tiny vision sizes, for whichever of these attributes the vision config class declares. Patch 4 and merge 2
#: keep a 16 x 24 image at 4 x 6 patches; the position grid (``num_position_embeddings``, ``image_size``,
#: ``num_patches``) is 6 x 6 patches; windows (Qwen2.5-VL) span 2 merged patches.
VISION_SIZES: Mapping[str, Any] = {
    "depth": 2,
    "num_hidden_layers": 2,
    "hidden_size": 40,
    "embed_dim": 40,
    "num_heads": 2,
    "num_attention_heads": 2,
    "intermediate_size": 56,
    "patch_size": 4,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "num_position_embeddings": 36,
    "num_patches": 36,
    "image_size": 24,
    "window_size": 16,
    "fullatt_block_indexes": [1],
    "deepstack_visual_indexes": [0],
    "rms_norm_eps": 7e-5,
    "layer_norm_eps": 9e-5,
}

#: Upstream's usual multimodal RoPE sections (temporal, height, width), whose proportions the tiny ones keep
#: where a config states none.
MROPE_PROPORTIONS = (16, 24, 24)


def _fields(config_class: type[PreTrainedConfig]) -> set[str]:
    return {f.name for f in dataclasses.fields(config_class)} if dataclasses.is_dataclass(config_class) else set()


def _scaled_sections(sections: list[int], total: int) -> list[int]:
    """``sections`` scaled to sum to ``total``, each at least 1, in the same proportions as far as integers go."""
    scaled = [max(1, section * total // sum(sections)) for section in sections]
    scaled[-1] += total - sum(scaled)
    if scaled[-1] < 1:
        raise ValueError(f"cannot split a rotary half-width of {total} into {len(sections)} sections")
    return scaled


def sub_config_class(config_class: type[PreTrainedConfig], attr: str) -> type[PreTrainedConfig]:
    """The config class of ``config_class``'s sub-config ``attr`` in a default config: the class ``sub_configs``
    names, or, where that is ``AutoConfig`` (glm46v's towers), the class of the default model_type it builds."""
    return type(getattr(config_class(), attr))


def tiny_text_sizes(config_class: type[PreTrainedConfig]) -> dict[str, Any]:
    """The tiny text config of a VLM whose top-level config class is ``config_class``.

    The text scaffolds' rules (:func:`~modelgraft.models.testing.tiny.tiny_overrides_for`) on the text config
    class, minus what the VLM declaration sets itself (vocabulary and special ids, from the tokenizer; dropout,
    off), with a head width of 16 and the RoPE sections (``mrope_section``) scaled to the tiny rotary half-width:
    ``head_dim * partial_rotary_factor / 2``.
    """
    text_class = sub_config_class(config_class, "text_config")
    sizes = {
        name: value
        for name, value in tiny_overrides_for(text_class, head_dim_explicit=True).items()
        if name != "vocab_size" and not name.endswith("_token_id") and "dropout" not in name
    }
    heads = sizes.get("num_attention_heads", 6)
    if "head_dim" in sizes:
        head_dim = sizes["head_dim"]
    else:  # the model derives it: hidden / heads
        head_dim = 16
        sizes["hidden_size"] = heads * head_dim
    default = text_class()
    rope = dict(getattr(default, "rope_parameters", None) or {})
    factor = rope.get("partial_rotary_factor", getattr(default, "partial_rotary_factor", 1.0) or 1.0)
    sections = rope.get("mrope_section") or list(MROPE_PROPORTIONS)
    rope.update(
        {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": _scaled_sections(list(sections), int(head_dim * factor) // 2),
        }
    )
    layer_types = getattr(default, "layer_types", None)
    if layer_types and getattr(default, "rope_parameters", None) == {}:
        # RoPE parameters keyed by layer type (cohere_compass's): a default config keeps none flat.
        sizes["rope_parameters"] = {layer_type: dict(rope) for layer_type in dict.fromkeys(layer_types)}
    else:
        sizes["rope_parameters"] = rope
    sizes["max_position_embeddings"] = 64
    return sizes


def tiny_vision_sizes(config_class: type[PreTrainedConfig], text_hidden: int) -> dict[str, Any]:
    """The tiny vision config: :data:`VISION_SIZES` for the attributes the vision config class declares, and
    its output width (``out_hidden_size``) the text decoder's ``text_hidden``."""
    vision_class = sub_config_class(config_class, "vision_config")
    declared = _fields(vision_class) or set(vision_class().to_dict())
    sizes = {name: value for name, value in VISION_SIZES.items() if name in declared}
    if "out_hidden_size" in declared:
        sizes["out_hidden_size"] = text_hidden
    return sizes


def _marker_ids(config_class: type[PreTrainedConfig]) -> dict[str, str]:
    declared = _fields(config_class) or set(config_class().to_dict())
    markers = {name: token for name, token in MARKER_TOKENS.items() if name in declared}
    unknown = sorted(
        name
        for name in declared
        if name.endswith("_token_id") and name not in MARKER_TOKENS and name not in PLACEHOLDER_IDS
    )
    if unknown:
        raise ValueError(
            f"{config_class.__name__} declares special ids these tests cannot feed: {', '.join(unknown)}"
            " (modelgraft.models.testing.scaffold_vlm.MARKER_TOKENS lists the known ones)"
        )
    return markers


def _image_processor(image_processor_class: type, vision: Mapping[str, Any]) -> Any:
    """The PIL image processor at the tiny patch sizes, bounded to tiny images (``size`` or min/max pixels)."""
    options: dict[str, Any] = {
        "patch_size": vision["patch_size"],
        "merge_size": vision["spatial_merge_size"],
        # A tower without temporal patches (cosmos3_edge) takes the processor's own (one frame per patch).
        "temporal_patch_size": vision.get("temporal_patch_size", image_processor_class.temporal_patch_size),
    }
    size = getattr(image_processor_class, "size", None)
    if isinstance(size, Mapping) and "shortest_edge" in size:
        options["size"] = {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}
    else:
        options.update(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    return image_processor_class(**options)


class _Derived:
    """What :class:`ScaffoldVlm` and :class:`ScaffoldVlmMoe` add to their suite's declaration."""

    config_class: type[PreTrainedConfig]
    processor_class: type[ProcessorMixin]
    image_processor_class: type
    vision_config: Mapping[str, Any]
    separate_videos: bool
    videos: bool

    def __post_init__(self) -> None:
        derive(self)
        super().__post_init__()  # type: ignore[misc]

    def config(self, **overrides: Any) -> PreTrainedConfig:
        """The suite's tiny config, with the special ids of the model's own tokens."""
        config = super().config(**overrides)  # type: ignore[misc]
        for name, value in self._special_ids().items():
            if name not in overrides:
                setattr(config, name, value)
        return config

    def batch(self, rows: list[tuple[str, list[Any], list[Any]]], *, labels: bool = True) -> dict[str, Any]:
        return super().batch(self._rows(rows), labels=labels)  # type: ignore[misc]

    @cached_property
    def markers(self) -> dict[str, str]:
        """Config attribute -> marker token, for the markers the config declares."""
        return _marker_ids(self.config_class)

    @cached_property
    def tokenizer_attributes(self) -> dict[str, str]:
        """The ``*_token`` attributes the processor reads from its tokenizer (PaddleOCR-VL's ``tokenizer.image_token``),
        found by building it: each one it asks for becomes a special token of its own, named after it
        (``<image_token>``). Empty for a processor with its own defaults (Qwen-VL's)."""
        return read_tokenizer_attributes(self._probe, self.processor_class.__name__)

    def _probe(self, attributes: Mapping[str, str]) -> ProcessorMixin:
        return build_processor(
            self.processor_class,
            image_processor=_image_processor(self.image_processor_class, self.vision_config),
            tokenizer=tiny_tokenizer(special_tokens=tuple(MARKER_TOKENS.values()), named=attributes),
        )

    @cached_property
    def placeholders(self) -> dict[str, str]:
        """``image_token_id`` (and ``video_token_id`` where the model takes videos) -> the processor's placeholder
        token: its own default, or the one it reads from the tokenizer."""
        probe = self._probe(self.tokenizer_attributes)
        if not self.videos:
            return {"image_token_id": probe.image_token}
        return {"image_token_id": probe.image_token, "video_token_id": probe.video_token}

    @cached_property
    def tokenizer(self) -> Any:
        attributes = self.tokenizer_attributes
        specials = (*self.markers.values(), *self.placeholders.values())
        return tiny_tokenizer(
            special_tokens=tuple(token for token in specials if token not in attributes.values()), named=attributes
        )

    def processor(self) -> ProcessorMixin:
        return build_processor(
            self.processor_class,
            image_processor=_image_processor(self.image_processor_class, self.vision_config),
            tokenizer=self.tokenizer,
        )

    def _special_ids(self) -> dict[str, int]:
        tokens = {**self.markers, **self.placeholders}
        return {name: self.tokenizer.convert_tokens_to_ids(token) for name, token in tokens.items()}

    def _placeholder(self, kind: str) -> str:
        start = self.markers.get(f"{kind}_start_token_id") or self.markers.get("vision_start_token_id", "")
        end = self.markers.get(f"{kind}_end_token_id") or self.markers.get("vision_end_token_id", "")
        return f"{start}{self.placeholders[f'{kind}_token_id']}{end}"

    @property
    def image_placeholder_token(self) -> str:
        return self.placeholders["image_token_id"]

    def _rows(self, rows: list[tuple[str, list[Any], list[Any]]]) -> list[tuple[str, list[Any], list[Any]]]:
        """The suite's rows with Qwen-VL's placeholders swapped for the model's own."""
        image = self._placeholder("image")
        if not self.videos:
            if any(VIDEO in text or vids for text, _, vids in rows):
                raise ValueError(f"{self.model_type} takes no videos (videos=False): a row holds one")
            return [(text.replace(IMAGE, image), imgs, vids) for text, imgs, vids in rows]
        video = self._placeholder("video")
        return [(text.replace(IMAGE, image).replace(VIDEO, video), imgs, vids) for text, imgs, vids in rows]

    def multimodal_batch(self, *, labels: bool = True) -> dict[str, Any]:
        """The suite's image-and-video batch; for a model whose videos share the image token (``separate_videos``)
        or that takes no videos (``videos=False``), images only (one row with two): upstream cannot count the two
        kinds apart in one batch, or has no video to count."""
        if self.videos and not self.separate_videos:
            return super().multimodal_batch(labels=labels)  # type: ignore[misc]
        return self.batch(
            [
                (f"w1 w2 {IMAGE} w3 w4", [synthetic_image(16, 24, seed=1)], []),
                (f"w5 {IMAGE} w6", [synthetic_image(16, 16, seed=2)], []),
                ("w7 w8 w9", [], []),
                (f"w10 {IMAGE} w11 {IMAGE} w12", [synthetic_image(8, 16, seed=3), synthetic_image(8, 8, seed=4)], []),
            ],
            labels=labels,
        )

    def video_batch(self, *, frames: int = 2, labels: bool = True) -> dict[str, Any]:
        """Videos without images: a video row, a padded text-only row and a second video of other sizes."""
        return self.batch(
            [
                (f"w1 {VIDEO} w2 w3", [], [synthetic_video(16, 8, frames=frames, seed=8)]),
                ("w4 w5", [], []),
                (f"w6 w7 {VIDEO}", [], [synthetic_video(8, 16, frames=frames, seed=9)]),
            ],
            labels=labels,
        )


@dataclasses.dataclass(frozen=True)
class ScaffoldVlm(_Derived, VlmModel):
    """A :class:`VlmModel` whose sizes and special tokens come from upstream's classes (see the module docstring)."""

    text_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    vision_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: Upstream finds image and video placeholders by one token (GLM-4V): images and videos in separate batches.
    separate_videos: bool = False
    #: Upstream takes videos; False for an image-only model (one placeholder mask, no video processor:
    #: PaddleOCR-VL), whose batches hold images and text only (:class:`ImagesOnly` holds its suite's checks).
    videos: bool = True


@dataclasses.dataclass(frozen=True)
class ScaffoldVlmMoe(_Derived, VlmMoeModel):
    """:class:`ScaffoldVlm` over the VLM-MoE declaration (router logits in every batch, eager experts)."""

    text_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    vision_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    separate_videos: bool = False
    videos: bool = True
    #: The text config's attributes of the routed experts' number and of one expert's intermediate size.
    num_experts_attr: str = "num_experts"
    expert_intermediate_attr: str = "moe_intermediate_size"
    #: The hub stores the fused experts transposed (``[E, H, 2I]``, Qwen3-VL-MoE), which the converter reads.
    hub_transposed: bool = False


#: Tiny widths of the top-level config's own modules (cosmos3_edge's projector next to the tower).
TOP_LEVEL_SIZES: Mapping[str, Any] = {"projector_hidden_size": 52}


def derive(declaration: Any) -> None:
    """Fill the declaration's empty ``text_config`` / ``vision_config`` from its config class, and the top-level
    widths (:data:`TOP_LEVEL_SIZES`) it declares into ``sizes``."""
    declared = _fields(declaration.config_class) or set(declaration.config_class().to_dict())
    top = {name: value for name, value in TOP_LEVEL_SIZES.items() if name in declared}
    object.__setattr__(declaration, "sizes", {**top, **declaration.sizes})
    if not declaration.text_config:
        object.__setattr__(declaration, "text_config", tiny_text_sizes(declaration.config_class))
    if not declaration.vision_config:
        hidden = declaration.text_config["hidden_size"]
        object.__setattr__(declaration, "vision_config", tiny_vision_sizes(declaration.config_class, hidden))


#: Where a scaffold keeps upstream's modules on purpose: torch's own layers and transformers' activation modules.
#: Every other module of a built model must be a class of the generated file (AutoModel towers are not), or of
#: the generated module registered for a sub-config's model_type (glm46v's glm4v towers, built by
#: ``build_sub_model``).
KEPT_UPSTREAM_PACKAGES = ("torch.nn.modules.", "transformers.activations.")


def generated_modules(config: PreTrainedConfig, model_type: str, backend: str) -> set[str]:
    """The generated modules a built model may take its modules from: its own, and that registered for each
    sub-config's model_type (where one is)."""
    modules = {MODELING_REGISTRY.module_path(model_type, backend)}
    for attr in ("vision_config", "text_config"):
        sub_type = getattr(getattr(config, attr, None), "model_type", None)
        if sub_type in MODELING_REGISTRY and sub_type != model_type:
            modules.add(MODELING_REGISTRY.module_path(sub_type, backend))
    return modules


def _modalities(batch: Mapping[str, Any]) -> list[str]:
    return [modality for modality, grids in GRIDS.items() if grids in batch]


class _ScaffoldChecks:
    """The VLM-suite checks that name Qwen-VL's tokens, both RoPE slots, both modalities in one batch or a
    hand-kept module list, read from the scaffold's declaration instead; and a video-only batch."""

    model: Any

    def _long_video_batch(self) -> dict[str, Any]:
        """A video of 6 frames (3 temporal patches), with an image row where the model takes both in a batch."""
        if not self.model.separate_videos:
            return super()._long_video_batch()  # type: ignore[misc]
        return self.model.video_batch(frames=6)

    def _items_per_row(self, tokens: torch.Tensor, kind: int, grids: torch.Tensor | None) -> list[int]:
        """How many images or videos each row holds: its placeholder runs, where a processor that gives each
        frame of a video a run of its own (cosmos3_edge, between timestamps) counts a video's frames as one."""
        runs = []
        for row in tokens:
            marked = (row == kind).int()
            runs.append(int(((marked[1:] - marked[:-1]) == 1).sum() + marked[0]))
        if grids is None or sum(runs) == len(grids):
            return runs
        frames = iter(grids[:, 0].tolist())
        assert sum(runs) == int(grids[:, 0].sum()), "placeholder runs are neither one per item nor one per frame"
        items = []
        for left in runs:
            count = 0
            while left > 0:
                left -= next(frames)
                count += 1
            items.append(count)
        return items

    def test_processor_expands_an_image_and_a_two_frame_video_into_their_placeholders(self) -> None:
        """One patch row per grid cell, and one placeholder per feature row upstream's tower gives (a merged
        patch each in Qwen2-VL; HY-V4-VL adds one per merged row for its row breaks)."""
        merge = self.model.vision_config["spatial_merge_size"]
        upstream = get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)
        tower = upstream(self.model.config()).eval()
        features = {"image_grid_thw": tower.get_image_features, "video_grid_thw": tower.get_video_features}
        for batch in (self.model.multimodal_batch(), self.model.video_batch()):
            tokens = batch["mm_token_type_ids"]
            for kind, (pixels, grids) in enumerate(
                (("pixel_values", "image_grid_thw"), ("pixel_values_videos", "video_grid_thw")), start=1
            ):
                if grids not in batch:
                    assert int((tokens == kind).sum()) == 0
                    continue
                assert bool(((batch[grids][:, 1:] % merge) == 0).all())
                assert batch[pixels].shape[0] == int(batch[grids].prod(-1).sum())
                with torch.no_grad():
                    rows = features[grids](batch[pixels], batch[grids]).pooler_output
                assert int((tokens == kind).sum()) == sum(int(piece.shape[0]) for piece in rows)
        images = self.model.multimodal_batch()
        image_ids = images["input_ids"][images["mm_token_type_ids"] == 1]
        assert bool((image_ids == self.model.token_id(self.model.image_placeholder_token)).all())

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_video_batch_matches_upstream(self, backend: str, dtype: torch.dtype) -> None:
        self._parity(backend, self.model.video_batch(), dtype=dtype)  # type: ignore[attr-defined]

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_reference_rope_kernels_are_upstream_bit_for_bit(self, backend: str, dtype: torch.dtype) -> None:
        """Each RoPE slot the scaffold guards, its reference kernel bound alone: logits, loss and every gradient
        exactly upstream's."""
        slots = [slot for slot in ("rope", "rope_vision") if slot in self.model.guarded]
        if not slots:  # the fit reported why (a RoPE function of another shape), and the scaffold lists it
            pytest.skip(f"{self.model.causal_lm} guards no RoPE slot: the scaffold left upstream's RoPE in place")
        for slot in slots:
            _, candidate = self._parity(  # type: ignore[attr-defined]
                backend,
                self.model.multimodal_batch(),
                kernels={slot: reference_kernel(slot)},
                dtype=dtype,
                tolerance=Tolerance(rtol=0.0, atol=0.0),
                logits="equal",
            )
            assert candidate.calls[slot] > 0

    def test_metadata_step_adds_the_vision_keys_of_the_modalities_in_the_batch(self, backend: str) -> None:
        step = self._collate_func(backend)  # type: ignore[attr-defined]
        for batch in (self.model.multimodal_batch(), self.model.video_batch(), self.model.text_only_batch()):
            collated = step(batch)
            assert set(collated) - set(batch) == metadata_keys(*_modalities(batch))

    def test_metadata_step_counts_one_segment_per_frame_and_a_position_per_patch(self, backend: str) -> None:
        batch = self._long_video_batch()
        collated = self._collate_func(backend)(batch)  # type: ignore[attr-defined]
        for modality in _modalities(batch):
            frames = [int(h * w) for t, h, w in batch[GRIDS[modality]].tolist() for _ in range(t)]
            cu_seqlens = collated[f"{modality}_cu_seqlens"]
            assert cu_seqlens.tolist() == [sum(frames[:i]) for i in range(len(frames) + 1)]
            assert collated[f"{modality}_max_seqlen"] == max(frames)
            assert tuple(collated[f"{modality}_position_ids"].shape) == (sum(frames), 2)
        temporal = self.model.processor().image_processor.temporal_patch_size
        assert batch["video_grid_thw"][0, 0] == 6 // temporal > 1  # the video really has several segments

    def test_max_seqlen_is_what_flash_attention_computes(self, backend: str) -> None:
        """Other attention implementations split by cu_seqlens; flash attention reads max_seqlen."""
        from types import SimpleNamespace

        from transformers.utils.generic import get_max_seqlen

        batch = self._long_video_batch()
        collated = self._collate_func(backend)(batch)  # type: ignore[attr-defined]
        flash = SimpleNamespace(_attn_implementation="flash_attention_2")
        for modality in _modalities(batch):
            expected = get_max_seqlen(collated[f"{modality}_cu_seqlens"], flash)
            assert collated[f"{modality}_max_seqlen"] == expected

    def test_model_reads_the_precomputed_metadata(self, backend: str) -> None:
        """Wrong metadata changes the logits, for each modality of each batch: the keys are read, not ignored."""
        seed_everything(0)
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend).eval()
        for batch in (self.model.multimodal_batch(labels=False), self.model.video_batch(labels=False)):
            collated = model.get_metadata_collate_func()(batch)
            with torch.no_grad():
                expected = model(**collated).logits
                for modality in _modalities(batch):
                    one_segment = {**collated}
                    total = collated[f"{modality}_cu_seqlens"][-1:]
                    one_segment[f"{modality}_cu_seqlens"] = torch.cat([total.new_zeros(1), total])
                    assert not torch.equal(model(**one_segment).logits, expected), f"{modality}_cu_seqlens unread"
                    if "rope_vision" not in self.model.guarded:
                        continue  # a tower without a rotary embedding (cosmos3_edge) has no use for position ids
                    no_positions = {**collated}
                    no_positions[f"{modality}_position_ids"] = torch.zeros_like(collated[f"{modality}_position_ids"])
                    assert not torch.equal(model(**no_positions).logits, expected), f"{modality}_position_ids unread"

    def test_every_module_is_generated_or_deliberately_left_upstream(self, backend: str) -> None:
        """Every module outside the generated files (the model's, its registered sub-models') is a torch layer or an
        activation module (KEPT_UPSTREAM_PACKAGES)."""
        config = self.model.config()
        model = build_model(config, architecture=self.model.causal_lm, backend=backend)
        outside = set.intersection(
            *(
                module_classes_outside(model, module)
                for module in generated_modules(config, self.model.model_type, backend)
            )
        )
        assert {name for name in outside if not name.startswith(KEPT_UPSTREAM_PACKAGES)} == set()

    #: The zoo's hand-kept list has no counterpart here: a scaffold keeps upstream's modules by package.
    test_every_module_left_upstream_is_in_the_model = None


class ScaffoldVlmParitySuite(_ScaffoldChecks, VlmParitySuite):
    """The VLM suite for a scaffold's :class:`ScaffoldVlm` declaration."""


def _words(first: int, last: int) -> str:
    return " ".join(f"w{i}" for i in range(first, last))


class ImagesOnly:
    """The VLM suite's checks for an image-only model (``ScaffoldVlm(videos=False)``: upstream's
    ``get_placeholder_mask`` returns the image mask alone, and nothing takes videos), listed before
    :class:`ScaffoldVlmParitySuite` among a test class's bases.

    Every check that feeds a video is replaced by its counterpart on images, over the declaration's image batch
    (an image row, a second image row of other sizes, a padded text-only row, a row of two images); and the
    sequence-parallel forward, which finds an image-only model's placeholders by the config's image id instead of
    upstream's mask, runs on two gloo ranks against one process.
    """

    model: Any

    #: The rows of the image batch by the kind of sample each holds.
    _rows: ClassVar[Mapping[str, int]] = MappingProxyType({"text-only": 2, "image": 0, "two-images": 3})
    packed_kinds: ClassVar[tuple[str, ...]] = ("text-only", "image", "two-images")

    test_processor_expands_an_image_and_a_two_frame_video_into_their_placeholders = None
    test_image_and_video_batch_matches_upstream = None
    test_video_batch_matches_upstream = None
    test_metadata_step_counts_one_segment_per_frame_and_a_position_per_patch = None
    test_model_fed_the_metadata_gives_the_same_step_on_images_and_videos = None
    test_model_fed_the_metadata_gives_the_same_step_on_a_video_of_several_frames = None

    def test_the_declaration_takes_no_videos(self) -> None:
        """The mixin is for image-only declarations: a model with videos would lose its video checks here."""
        assert not self.model.videos and "video_token_id" not in self.model.placeholders

    def test_processor_expands_each_image_into_its_placeholders(self) -> None:
        batch = self.model.multimodal_batch()
        merge = self.model.vision_config["spatial_merge_size"]
        grids, tokens = batch["image_grid_thw"], batch["mm_token_type_ids"]
        assert len(grids) == 4 and "pixel_values_videos" not in batch and not bool((tokens == 2).any())
        assert bool(((grids[:, 1:] % merge) == 0).all())
        assert batch["pixel_values"].shape[0] == int(grids.prod(-1).sum())
        assert int((tokens == 1).sum()) == int(grids.prod(-1).sum()) // merge**2
        placeholder = self.model.token_id(self.model.image_placeholder_token)
        assert bool((batch["input_ids"][tokens == 1] == placeholder).all())

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_image_batch_matches_upstream(self, backend: str, dtype: torch.dtype) -> None:
        self._parity(backend, self.model.multimodal_batch(), dtype=dtype)  # type: ignore[attr-defined]

    @pytest.mark.parametrize("sample", ["text-only", "image", "two-images"])
    def test_position_id_func_equals_upstream_get_rope_index(self, backend: str, sample: str) -> None:
        rows = self.model.multimodal_batch(labels=False)
        batch = self._sample(rows, self._rows[sample])  # type: ignore[attr-defined]
        expected = self._upstream_rope_index(batch)  # type: ignore[attr-defined]
        actual = self._position_id_func(backend)(**_rope_index_inputs(batch))  # type: ignore[attr-defined]
        assert all(torch.equal(a, e) for a, e in zip(actual, expected, strict=True))

    def test_metadata_step_adds_the_vision_keys_of_the_modalities_in_the_batch(self, backend: str) -> None:
        step = self._collate_func(backend)  # type: ignore[attr-defined]
        for batch, keys in (
            (self.model.multimodal_batch(), metadata_keys("image")),
            (self.model.text_only_batch(), set()),
        ):
            assert set(step(batch)) - set(batch) == keys

    def test_metadata_step_counts_one_segment_per_image_and_a_position_per_patch(self, backend: str) -> None:
        batch = self.model.multimodal_batch()
        collated = self._collate_func(backend)(batch)  # type: ignore[attr-defined]
        patches = [int(t * h * w) for t, h, w in batch["image_grid_thw"].tolist()]
        assert len(patches) > 1  # several images: several segments
        assert collated["image_cu_seqlens"].tolist() == [sum(patches[:i]) for i in range(len(patches) + 1)]
        assert collated["image_max_seqlen"] == max(patches)
        assert tuple(collated["image_position_ids"].shape) == (sum(patches), 2)

    def test_max_seqlen_is_what_flash_attention_computes(self, backend: str) -> None:
        """Other attention implementations split by cu_seqlens; flash attention reads max_seqlen."""
        from types import SimpleNamespace

        from transformers.utils.generic import get_max_seqlen

        collated = self._collate_func(backend)(self.model.multimodal_batch())  # type: ignore[attr-defined]
        flash = SimpleNamespace(_attn_implementation="flash_attention_2")
        assert collated["image_max_seqlen"] == get_max_seqlen(collated["image_cu_seqlens"], flash)

    def test_model_fed_the_metadata_gives_the_same_step_on_images(self, backend: str) -> None:
        self._assert_same_step(backend, self.model.multimodal_batch())  # type: ignore[attr-defined]

    def test_model_reads_the_precomputed_metadata(self, backend: str) -> None:
        """Wrong metadata changes the logits: the equal steps are the metadata's doing, not keys nobody reads."""
        seed_everything(0)
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend).eval()
        collated = model.get_metadata_collate_func()(self.model.multimodal_batch(labels=False))
        with torch.no_grad():
            expected = model(**collated).logits
            one_segment = {
                **collated,
                "image_cu_seqlens": torch.cat([collated["image_cu_seqlens"][:1], collated["image_cu_seqlens"][-1:]]),
            }
            assert not torch.equal(model(**one_segment).logits, expected), "image_cu_seqlens unread"
            if "rope_vision" in self.model.guarded:
                no_positions = {**collated, "image_position_ids": torch.zeros_like(collated["image_position_ids"])}
                assert not torch.equal(model(**no_positions).logits, expected), "image_position_ids unread"

    def test_sp2_with_images_on_both_ranks_matches_one_process(self) -> None:
        """Two sequence-parallel ranks (Ulysses on the text decoder, the tower on every rank) with an image in each
        rank's slice: logits at real tokens, loss and every gradient are one process's."""
        spawn(
            images_split_over_two_sequence_ranks_match_one_process,
            2,
            type(self).__module__,
            type(self).__qualname__,
            timeout=300.0,
        )


def images_split_over_two_sequence_ranks_match_one_process(module: str, suite: str) -> None:
    """On each of 2 gloo ranks of one sequence-parallel group: the suite's model on its slice of an image batch
    (row 0's image in rank 1's half; row 1's first image in rank 0's, its second in rank 1's), against the whole
    batch in one process."""
    from modelgraft.models.distributed import (
        ParallelState,
        attach_parallel,
        average_gradients,
        full_state,
        gather_sequence,
        shard_multimodal,
    )

    declaration = getattr(importlib.import_module(module), suite).model
    state = ParallelState.build(sp=2)
    config = declaration.config()
    batch = declaration.batch(
        [
            (f"{_words(1, 10)} {IMAGE} {_words(10, 13)}", [synthetic_image(16, 16, seed=1)], []),
            (
                f"{IMAGE} {_words(13, 20)} {IMAGE}",
                [synthetic_image(16, 16, seed=3), synthetic_image(8, 16, seed=4)],
                [],
            ),
        ]
    )
    seed_everything(0)
    reference = build_model(config, architecture=declaration.causal_lm)
    expected = reference(**batch)
    expected.loss.backward()
    expected_grads = {name: param.grad for name, param in reference.named_parameters()}

    seed_everything(0)
    model = build_model(config, architecture=declaration.causal_lm)
    positions, _ = model.get_position_id_func()(**_rope_index_inputs(batch))
    attach_parallel(model, state)
    local = shard_multimodal({**batch, "position_ids": positions}, state, pad_token_id=config.text_config.pad_token_id)
    assert bool((local["mm_token_type_ids"] == 1).any()), "this rank's slice holds no image placeholder"
    out = model(**local)
    real = batch["attention_mask"].bool()
    logits = gather_sequence(out.logits, state, length=real.shape[1])
    torch.testing.assert_close(logits[real], expected.logits[real], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.loss, expected.loss, rtol=1e-4, atol=1e-5)
    out.loss.backward()
    average_gradients(model, state)
    grads = full_state(model, state, grads=True)
    assert grads.keys() == expected_grads.keys()
    for name, grad in expected_grads.items():
        if grad is None:
            assert not grads[name].any(), f"{name}: no gradient in one process, a nonzero one on two ranks"
        else:
            torch.testing.assert_close(
                grads[name], grad, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}"
            )


class ScaffoldVlmMoeParitySuite(_ScaffoldChecks, VlmMoeParitySuite):
    """The VLM-MoE suite for a scaffold's :class:`ScaffoldVlmMoe` declaration: the checks that name Qwen3-VL-MoE's
    config attribute (``num_experts``) and router slot read them from the declaration, and the hub checkpoints
    are the per-expert ones the converter reads (``test_per_expert_checkpoint_loads_to_upstream_logits``)."""

    model: ScaffoldVlmMoe  # type: ignore[assignment]

    def _experts(self, config: PreTrainedConfig) -> int:
        return getattr(config.text_config, self.model.num_experts_attr)

    def test_router_logits_cover_every_text_token_of_the_batch(self, backend: str) -> None:
        """One row per token of the padded batch, vision placeholders included: the aux loss balances them all."""
        batch = self.model.multimodal_batch(labels=False)
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend)
        with torch.no_grad():
            out = model(**batch)
        experts = self._experts(self.model.config())
        assert {tuple(logits.shape) for logits in out.router_logits} == {(batch["input_ids"].numel(), experts)}

    def test_experts_router_and_aux_loss_slots_are_consulted_once_per_sparse_layer_and_head(
        self, backend: str
    ) -> None:
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend)
        calls: Counter[str] = Counter()
        with reference_kernels_bound(calls):
            model(**self.model.multimodal_batch())
        sparse = self._sparse_layers(model)
        routers = [slot for slot in self.model.guarded if slot.endswith("_router")]
        assert sparse > 0
        assert calls["moe_experts"] == sparse
        assert [calls[slot] for slot in routers] == [sparse] * len(routers)
        assert calls["load_balancing_loss"] == int("load_balancing_loss" in self.model.guarded)

    def test_parallel_plan_shards_every_fused_expert_tensor_by_expert(self, backend: str) -> None:
        config = self.model.config()
        model = build_model(config, architecture=self.model.causal_lm, backend=backend)
        state = model.state_dict()
        selected: set[str] = set()
        for pattern, placement in model.get_parallel_plan().items():
            matched = plan_matches(pattern, list(state))
            assert matched, f"parallel plan pattern {pattern!r} names no parameter of {type(model).__name__}"
            assert placement == "shard(0)"
            assert all(state[name].shape[0] == self._experts(config) for name in matched)
            selected.update(matched)
        experts = {name for name in state if ".experts." in name}
        assert experts and experts == selected

    def test_model_holds_upstreams_experts_layout(self) -> None:
        """The generated modeling keeps upstream's ``[E, 2I, H]`` / ``[E, H, I]`` (what the converter fuses into)."""
        config = self.model.config()
        text = config.text_config
        model = build_model(config, architecture=self.model.causal_lm)
        shapes = {
            name.rsplit(".", 1)[1]: tuple(p.shape) for name, p in model.named_parameters() if ".experts." in name
        }
        e, h, i = self._experts(config), text.hidden_size, getattr(text, self.model.expert_intermediate_attr)
        assert shapes == {"gate_up_proj": (e, 2 * i, h), "down_proj": (e, h, i)}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """The hub-layout checks run where the hub stores the experts transposed (``hub_transposed``); other
        hubs store them per expert, which test_per_expert_checkpoint_loads_to_upstream_logits checks."""
        super().__init_subclass__(**kwargs)
        if "model" in cls.__dict__ and not cls.model.hub_transposed:
            cls.test_hub_layout_checkpoint_loads_as_transformers_loads_it = None  # type: ignore[assignment]
            cls.test_hub_layout_is_told_from_the_other_projection_where_gate_up_is_square = None  # type: ignore[assignment]
