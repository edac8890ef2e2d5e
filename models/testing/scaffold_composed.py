"""The composed-VLM declaration a scaffold's tests hold: tiny sizes and the processor derived at run time.

A zoo model's composed-VLM test (gemma3's) spells out its tiny config and its processor's options. A scaffold
(``copier copy``, a VLM of the composed contract) is written for a model nobody sized by hand, so
:class:`ScaffoldComposedVlm` derives both from upstream's classes:

- the text config: the sub-config class of the default text model_type at the text scaffolds' tiny sizes
  (``modelgraft.models.testing.tiny``), its vocabulary the tiny tokenizer's;
- the vision config: :data:`VISION_SIZES` for the attributes the vision config declares (a 28 x 28 image of
  7 x 7 patches, 2 layers), list-valued feature layers cut to the tiny depth; a projector keyed on the patch
  count (:data:`QUERY_DICT`) maps the tiny patches to half as many queries, and where its image processor pads
  every image to one fixed side (Aria's), the tower cuts that side into the same 4 x 4 patches;
- the processor: the model's own class (where transformers gives a placeholder for want of torchvision, the
  class ``modelgraft.models.processor_imports.importable_processor_class`` loads) over a word-level tokenizer
  holding every ``*_token`` string the processor names (its placeholder and the markers around it), the PIL
  image processor at the tiny image size (or, where upstream writes it for torchvision only, the class
  ``modelgraft.models.image_processor_imports`` runs on the torch stand-in, which the rendered test passes),
  and its options by name: ``patch_size`` and
  ``vision_feature_select_strategy`` from the config, and the placeholder count per image (``image_seq_length``,
  or ``num_additional_image_tokens`` on top of the patches) from what upstream's own ``get_image_features``
  returns for one image. A processor option these rules cannot set fails the declaration with its name.

:class:`ScaffoldComposedSuite` is the composed suite with the one check that names slots read from the
declaration: the slots this module guards are all called, and so are slots of both towers. It adds what the
sequence-parallel forward promises: packed documents, a text-only row beside an image row, and each half of the
sequence scattering the features of its own placeholders.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pytest
import torch
from transformers import CONFIG_MAPPING, PreTrainedConfig, PreTrainedTokenizerFast, ProcessorMixin

from modelgraft.models.composition import sub_model_class
from modelgraft.models.distributed.multimodal import packed_text_position_ids
from modelgraft.models.loader import get_model_class
from modelgraft.models.ops import bound_ops
from modelgraft.models.ops.binding import consulted_slots
from modelgraft.models.processor_imports import importable_processor_class
from modelgraft.models.processors import build_processor
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.batches import IGNORE_INDEX
from modelgraft.models.testing.composed_vlm_suite import (
    ComposedVlm,
    ComposedVlmSuite,
    generated_from_upstream,
    in_dtype,
)
from modelgraft.models.testing.gated_delta_net_suite import packed_document_kwargs, packed_document_ops
from modelgraft.models.testing.parity import (
    _kernels_bound,
    check_parity,
    tolerance_for,
)
from modelgraft.models.testing.reference import reference_kernels, training_step_slots
from modelgraft.models.testing.seed import seed_everything
from modelgraft.models.testing.tiny import TINY, tiny_overrides_for
from modelgraft.models.testing.vlm_processor import read_tokenizer_attributes, synthetic_image, tiny_tokenizer

__all__ = [
    "VISION_SIZES",
    "ScaffoldComposedSuite",
    "ScaffoldComposedVlm",
    "assert_each_half_scatters_its_own_placeholders",
]

#: The tiny image side; its patches are 7 x 7, so one image is 4 x 4 patches.
IMAGE_SIDE = 28
#: Tiny vision sizes, for whichever of these attributes the vision config class declares.
VISION_SIZES: Mapping[str, Any] = {
    "hidden_size": 64,  # 4 heads of 16: a 2-D vision RoPE splits a head in 4
    "intermediate_size": 72,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "image_size": IMAGE_SIDE,
    "patch_size": 7,
    "depth": 2,  # the Qwen-VL-like towers' names for the layers and heads
    "num_heads": 4,
    "num_key_value_heads": 2,  # a tower with grouped-query attention (Exaone4.5's)
    "layer_norm_eps": 3e-5,
}
#: Processor options set by these rules (besides the parts), by name.
KNOWN_OPTIONS = (
    "image_processor",
    "tokenizer",
    "video_processor",
    "chat_template",
    "patch_size",
    "vision_feature_select_strategy",
    "num_additional_image_tokens",
    "image_seq_length",
    "image_seq_len",
    "num_image_tokens",
    "spatial_merge_size",
    "size_conversion",
)
#: The patches per side of one tiny image, whatever its side in pixels.
GRID = IMAGE_SIDE // VISION_SIZES["patch_size"]
#: The ending of a top-level option mapping the tower's patch count to its projector's query count (Aria's
#: ``projector_patch_to_query_dict``): set to the tiny tower's patches, mapped to half as many queries.
QUERY_DICT = "patch_to_query_dict"
#: The options that are the number of placeholders per image, where a processor takes that number as given.
COUNT_OPTIONS = ("image_seq_length", "image_seq_len", "num_image_tokens")
WORDS = 60
BOS = "<bos>"
#: The tiling grid of models that cut images into tiles of the tower's size (LLaVA-NeXT's anyres), for the
#: config and the image processor alike: up to 2 x 2 tiles of the tiny side.
TILING = "image_grid_pinpoints"
PINPOINTS = [[IMAGE_SIDE * h, IMAGE_SIDE * w] for h, w in ((1, 1), (1, 2), (2, 1), (2, 2))]


def _declared(config_class: type[PreTrainedConfig]) -> dict[str, Any]:
    return config_class().to_dict()


def _needs_a_window(text_class: type[PreTrainedConfig], sizes: Mapping[str, Any]) -> bool:
    """The text model builds a sliding-window mask whatever its layers are (Step-3.7's), and the default leaves
    the window None, on which upstream's mask builder raises: the tiny config gives it the tiny window. Its full
    attention layers do not read it, so their masks are the same either way."""
    if "sliding_window" not in _declared(text_class) or text_class().sliding_window is not None:
        return False
    if any("sliding" in str(kind) for kind in sizes.get("layer_types") or ()):
        return False  # tiny_overrides_for has set it already
    try:
        module = importlib.import_module(text_class.__module__.replace(".configuration_", ".modeling_"))
    except ImportError:
        return False
    return _builds_a_sliding_mask_unconditionally(ast.parse(inspect.getsource(module)))


def _builds_a_sliding_mask_unconditionally(node: ast.AST, *, guarded: bool = False) -> bool:
    """A call of ``create_sliding_window_causal_mask`` under no test of sliding layers or the window (Qwen2's,
    under ``if self.has_sliding_layers``, is conditional; a test of a precomputed mask is not such a test)."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "create_sliding_window_causal_mask":
        return not guarded
    tested = isinstance(node, (ast.If, ast.IfExp)) and any(
        word in ast.unparse(node.test) for word in ("sliding", "layer_types")
    )
    inner = guarded or tested
    return any(_builds_a_sliding_mask_unconditionally(child, guarded=inner) for child in ast.iter_child_nodes(node))


def _image_size_options(image_processor_class: type) -> dict[str, Any]:
    """``size`` (and ``crop_size``) of the image processor at :data:`IMAGE_SIDE`, in the keys its default uses."""
    options: dict[str, Any] = {}
    defaults = image_processor_class()  # some set their sizes in __init__ only
    if getattr(defaults, TILING, None):
        options[TILING] = PINPOINTS
    for name in ("size", "crop_size", "max_image_size"):  # max_image_size: SmolVLM's tile side
        keys = _set_keys(getattr(defaults, name, None))
        if {"shortest_edge", "longest_edge"} <= keys:  # Idefics2's bounds: both at the tiny side, a square image
            options[name] = {"shortest_edge": IMAGE_SIDE, "longest_edge": IMAGE_SIDE}
        elif "shortest_edge" in keys:
            options[name] = {"shortest_edge": IMAGE_SIDE}
        elif "longest_edge" in keys:  # Pixtral's: images of any size up to it
            options[name] = {"longest_edge": IMAGE_SIDE}
        elif "height" in keys:
            options[name] = {"height": IMAGE_SIDE, "width": IMAGE_SIDE}
    if "height" in _set_keys(getattr(defaults, "patch_size", None)):  # it cuts patches itself (Pixtral's)
        options["patch_size"] = {"height": VISION_SIZES["patch_size"], "width": VISION_SIZES["patch_size"]}
    return options


#: What vision configs call the side of the square of patches merged into one feature (Qwen-VL's
#: ``spatial_merge_size``; muse_glimmer's ``merge_size``; kimi_k25's ``merge_kernel_size``, a pair).
MERGE_SIZE_NAMES = ("spatial_merge_size", "merge_size", "merge_kernel_size")
#: ... and the frames one patch spans (muse_glimmer's ``patch_temporal``).
TEMPORAL_PATCH_NAMES = ("temporal_patch_size", "patch_temporal")


def _first_set(*places: tuple[PreTrainedConfig, str]) -> int:
    """The first (config, attribute) of ``places`` that is set, else 1 (nothing merged, one frame); a pair must be
    square (the image processor takes one side)."""
    for config, name in places:
        value = getattr(config, name, None)
        if isinstance(value, (list, tuple)):
            if len(set(value)) != 1:
                raise ValueError(f"{type(config).__name__}.{name}={value!r}: the image processor takes one side")
            value = value[0]
        if value:
            return int(value)
    return 1


def _set_keys(size: Any) -> set[str]:
    """The keys a size holds a value for: a dict's, or the set fields of transformers' ``SizeDict``."""
    if isinstance(size, Mapping):
        return {key for key, value in size.items() if value is not None}
    if dataclasses.is_dataclass(size):
        return {f.name for f in dataclasses.fields(size) if getattr(size, f.name) is not None}
    return set()


@dataclass(frozen=True)
class ScaffoldComposedVlm:
    """A scaffolded composed VLM: upstream's classes and the sub-models' default types, as the scaffold read them."""

    model_type: str
    config_class: type[PreTrainedConfig]
    processor_class: type[ProcessorMixin]
    image_processor_class: type
    causal_lm: str
    #: The slots the module itself guards (its projector's, an own tower's, the loss head).
    guarded: tuple[str, ...]
    tower: str = "vision_tower"
    language_model: str = "language_model"
    #: Anything the processor class needs that the rules cannot set is reported here at first use.
    extra_specials: tuple[str, ...] = field(default=())
    #: ``get_image_features`` takes a row of images per sample, ``(batch, images, channels, height, width)``.
    image_rows: bool = False
    #: ``get_image_features`` takes patch rows and their ``image_grid_thw``: the image processor cuts them at the
    #: tiny patch size, and the processor counts each image's placeholders from its grid itself.
    image_grid: bool = False
    #: ``get_image_features`` takes each image's (height, width) in patches under this name (MiniCPM-V's
    #: ``target_sizes``): the image processor resizes images to the tiny scale at the tiny patch size, and the
    #: processor counts each image's placeholders from those sizes itself.
    image_patch_grid: str = ""

    def __post_init__(self) -> None:
        # A scaffold imports its processor class from transformers, which gives a placeholder for one whose
        # module needs torchvision only for helpers its PIL module also defines (PixtralProcessor, mistral3's).
        object.__setattr__(self, "processor_class", importable_processor_class(self.processor_class))

    @cached_property
    def _query_dict(self) -> str | None:
        """The config's option ending in :data:`QUERY_DICT`, where it declares one as a dict."""
        found = [n for n, v in _declared(self.config_class).items() if n.endswith(QUERY_DICT) and isinstance(v, dict)]
        return found[0] if found else None

    @cached_property
    def image_side(self) -> int:
        """The side in pixels of the images the tower sees: :data:`IMAGE_SIDE`, or, for a projector keyed on the
        patch count (:data:`QUERY_DICT`), the side its image processor pads every image to where that is one
        number (Aria's ``max_image_size``, which it does not let go below 490); the tower then cuts it into the
        same :data:`GRID` x :data:`GRID` patches, each that much larger."""
        pinned = getattr(self.image_processor_class, "max_image_size", None)
        return pinned if self._query_dict and type(pinned) is int and pinned % GRID == 0 else IMAGE_SIDE

    def _sub_type(self, attr: str) -> str:
        return getattr(self.config_class(), attr).model_type

    def _text(self, vocab: int) -> dict[str, Any]:
        text_class = CONFIG_MAPPING[self._sub_type("text_config")]
        sizes = {
            name: value
            for name, value in tiny_overrides_for(text_class).items()
            if not name.endswith("_token_id") and "dropout" not in name
        }
        if _needs_a_window(text_class, sizes):
            sizes["sliding_window"] = TINY["sliding_window"]
        return {**sizes, "model_type": text_class.model_type, "vocab_size": vocab, "pad_token_id": 0}

    def _vision(self, text_hidden: int) -> dict[str, Any]:
        """:data:`VISION_SIZES` for what the vision config declares; a tower that projects to the text width
        itself (``out_hidden_size``, ``projection_dim``) projects to the tiny text's."""
        vision_class = CONFIG_MAPPING[self._sub_type("vision_config")]
        declared = _declared(vision_class)
        sizes = {name: value for name, value in VISION_SIZES.items() if name in declared}
        if self.image_side != IMAGE_SIDE and {"image_size", "patch_size"} <= set(sizes):
            sizes.update(image_size=self.image_side, patch_size=self.image_side // GRID)
        for name in ("out_hidden_size", "projection_dim"):  # Janus's aligner projects to projection_dim
            if name in declared:
                sizes[name] = text_hidden
        return {**sizes, "model_type": vision_class.model_type}

    def _top_level(self, image_token_id: int) -> dict[str, Any]:
        declared = _declared(self.config_class)
        options: dict[str, Any] = {"image_token_id": image_token_id}
        for name in ("vision_feature_layer", "vision_feature_layers"):
            if isinstance(declared.get(name), list):  # several layers (vipllava): two of the tiny tower's
                options[name] = [-2, -1]
        if TILING in declared:
            options[TILING] = PINPOINTS
        if self._query_dict:
            options[self._query_dict] = {GRID * GRID: GRID * GRID // 2}
        return options

    def _projector_widths(self, text_hidden: int) -> dict[str, int]:
        """Top-level widths of a projector the model builds from its own config (Kimi-K2.5's
        ``projection_hidden_size``, MuSE-Glimmer's ``out_hidden_size`` and ``projector_hidden_size``), at tiny sizes:
        a multiple of the tower's default width (its merged patches) stays that multiple of the tiny tower's, the
        text model's default width becomes the tiny text's, and any other ``*hidden_size`` (the projector's own
        inner width) the tiny text's too."""
        defaults = self.config_class()
        vision_hidden = getattr(defaults.vision_config, "hidden_size", None)
        text_default = getattr(defaults.text_config, "hidden_size", None)
        widths: dict[str, int] = {}
        for name, value in _declared(self.config_class).items():
            if not name.endswith("hidden_size") or type(value) is not int or value <= 0:
                continue
            if isinstance(vision_hidden, int) and value % vision_hidden == 0 and value != text_default:
                widths[name] = VISION_SIZES["hidden_size"] * (value // vision_hidden)
            else:
                widths[name] = text_hidden
        return widths

    def _build_config(
        self, image_token_id: int, vocab: int, markers: Mapping[str, int] | None = None
    ) -> PreTrainedConfig:
        text = self._text(vocab)
        hidden = text.get("hidden_size") or CONFIG_MAPPING[text["model_type"]]().hidden_size
        top = {**self._top_level(image_token_id), **(markers or {})}
        if "projection_dim" in _declared(self.config_class):  # PaliGemma's projector: tower -> text width
            top["projection_dim"] = hidden
        top = {**self._projector_widths(hidden), **top}
        config = self.config_class(text_config=text, vision_config=self._vision(hidden), **top)
        for sub in (config, config.text_config, config.vision_config):
            sub._attn_implementation = "eager"
            # Upstream's per-expert loop, as the MoE suites pin it: its default grouped_mm needs 16-byte aligned
            # strides on a CPU in bf16, which the tiny expert widths do not give.
            sub._experts_implementation = "eager"
        return config

    def _tokenizer(self, specials: tuple[str, ...], named: Mapping[str, str] | None = None) -> PreTrainedTokenizerFast:
        """The word-level tokenizer with ``specials``, and ``named`` as attributes (``tokenizer.start_image_token``,
        and its ``_id``), which some processors read from the hub's tokenizer; it has a BOS token, as hub
        tokenizers do (PaliGemma's processor writes ``tokenizer.bos_token`` after the images)."""
        words = tiny_tokenizer(words=WORDS, special_tokens=(BOS, *specials, *(named or {}).values()))
        return PreTrainedTokenizerFast(
            tokenizer_object=words.backend_tokenizer,
            pad_token=words.pad_token,
            unk_token=words.unk_token,
            eos_token=words.eos_token,
            bos_token=BOS,
            extra_special_tokens=dict(named or {}),
        )

    @cached_property
    def _parts(self) -> tuple[PreTrainedConfig, ProcessorMixin]:
        """The tiny config and the processor, consistent with each other (see the module docstring)."""
        signature = inspect.signature(self.processor_class.__init__)
        unknown = [
            name
            for name, parameter in signature.parameters.items()
            if name not in ("self", *KNOWN_OPTIONS)
            and parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)
            and parameter.default is parameter.empty
        ]
        if unknown:
            raise TypeError(
                f"{self.processor_class.__name__} needs {', '.join(unknown)}, which the composed scaffold's tests"
                " cannot set (modelgraft.models.testing.scaffold_composed.KNOWN_OPTIONS)"
            )
        image_token = signature.parameters.get("image_token")
        specials = ((image_token.default,) if image_token and isinstance(image_token.default, str) else ()) + tuple(
            self.extra_specials
        )
        attributes = self._tokenizer_attributes(specials)
        processor = self._processor(self._tokenizer(specials, attributes), {})
        named = tuple(
            dict.fromkeys(
                value
                for name, value in vars(processor).items()
                if name.endswith("token") and isinstance(value, str) and value
            )
        )
        tokenizer = self._tokenizer(tuple(dict.fromkeys(specials + named)), attributes)
        processor = self._processor(tokenizer, {})
        image_token_id = getattr(processor, "image_token_id", None)  # the id it writes (aya_vision: a patch token)
        if not isinstance(image_token_id, int):
            image_token_id = tokenizer.convert_tokens_to_ids(processor.image_token)
        # The config's other marker ids (Ovis2.5's image_start_token_id) are the ids of the tokens the processor
        # writes under the same name (image_start_token).
        markers = {
            name: tokenizer.convert_tokens_to_ids(token)
            for name in _declared(self.config_class)
            if name.endswith("_token_id")
            and name != "image_token_id"
            and isinstance(token := getattr(processor, name.removesuffix("_id"), None), str)
        }
        config = self._build_config(image_token_id, len(tokenizer), markers)
        if self.image_grid or self.image_patch_grid:  # the processor counts from the image processor's grid
            return config, self._processor(tokenizer, {})
        count = self._features_per_image(config)
        options = self._count_options(signature, config, count)
        side = math.isqrt(count)
        # A processor that counts side ** 2 placeholders per tile from its image processor's patch_size
        # (Cohere2-Vision's): that side is the tiny tower's.
        tile_side = side if side * side == count and self._counts_from_image_patch_size(tokenizer) else None
        processor = self._processor(tokenizer, options, count, tile_side)
        for name in COUNT_OPTIONS:
            # A count the class fixes as a class attribute, which __init__ does not take (GOT-OCR2's 256 per
            # image): the instance's own value, which the processor's call defaults to, is the tiny model's.
            if name not in signature.parameters and isinstance(getattr(type(processor), name, None), int):
                setattr(processor, name, count)
        return config, processor

    def _tokenizer_attributes(self, specials: tuple[str, ...]) -> dict[str, str]:
        """The ``*_token`` attributes the processor reads from its tokenizer, found by building it: each one it
        asks for and the tiny tokenizer lacks becomes a special token of its own (``<start_image_token>``)."""
        return read_tokenizer_attributes(
            lambda attributes: self._processor(self._tokenizer(specials, attributes), {}),
            self.processor_class.__name__,
        )

    def _processor(
        self,
        tokenizer: PreTrainedTokenizerFast,
        options: Mapping[str, Any],
        count: int = 1,
        tile_side: int | None = None,
    ) -> ProcessorMixin:
        if self.image_grid:
            sizes = self._grid_options()
        elif self.image_patch_grid:
            sizes = self._patch_grid_options()
        else:
            sizes = _image_size_options(self.image_processor_class)
        image_processor = self.image_processor_class(**sizes)
        if hasattr(image_processor, "image_seq_length"):  # PaliGemma's processor takes its count from here
            image_processor.image_seq_length = count
        if tile_side is not None:  # see _counts_from_image_patch_size
            image_processor.patch_size = tile_side
        if hasattr(image_processor, "vision_patch_size"):
            # The tower's patch side, its placeholders' unit (Step-3.7); the image processor's own patch_size is then
            # the side in pixels its local crops are resized to (504), which the tiny tower sees as one image of its
            # own: left at 504, each crop was 5,184 patches, and the scaffold's tests took minutes.
            image_processor.vision_patch_size = VISION_SIZES["patch_size"]
            image_processor.patch_size = IMAGE_SIDE
        # build_processor adds the video processor a class takes (images only, here: upstream's needs torchvision).
        return build_processor(self.processor_class, image_processor=image_processor, tokenizer=tokenizer, **options)

    def _counts_from_image_patch_size(self, tokenizer: PreTrainedTokenizerFast) -> bool:
        """Whether the processor takes its ``patch_size`` (the side of its placeholders per tile) from the image
        processor's integer one rather than from an option of its own: built over two image processors whose
        ``patch_size`` differ, its own follows them (Cohere2-Vision's; a processor whose ``__init__`` takes
        ``patch_size`` is sized by :meth:`_count_options` instead)."""
        if "patch_size" in inspect.signature(self.processor_class.__init__).parameters:
            return False
        side = getattr(self.image_processor_class(), "patch_size", None)
        if not isinstance(side, int) or isinstance(side, bool):
            return False
        followed = []
        for probe in (side, side + 1):
            image_processor = self.image_processor_class(**_image_size_options(self.image_processor_class))
            image_processor.patch_size = probe
            processor = build_processor(self.processor_class, image_processor=image_processor, tokenizer=tokenizer)
            followed.append(getattr(processor, "patch_size", None) == probe)
        return all(followed)

    def _grid_options(self) -> dict[str, Any]:
        """The image processor of patch rows at the tiny patch size, the model's merge size and its temporal patch
        (1 where the vision config has none: its patch embedding reads one frame), bounded to tiny images."""
        defaults = self.config_class()
        vision = defaults.vision_config
        merge = _first_set(
            *((vision, name) for name in MERGE_SIZE_NAMES[:1]),
            (defaults, MERGE_SIZE_NAMES[0]),
            *((vision, name) for name in MERGE_SIZE_NAMES[1:]),
        )
        options: dict[str, Any] = {
            "patch_size": VISION_SIZES["patch_size"],
            "merge_size": merge,
            "temporal_patch_size": _first_set(*((vision, name) for name in TEMPORAL_PATCH_NAMES)),
        }
        side = VISION_SIZES["patch_size"] * merge
        low, high = (side * 2) ** 2, (side * 3) ** 2
        if "shortest_edge" in _set_keys(getattr(self.image_processor_class(), "size", None)):
            options["size"] = {"shortest_edge": low, "longest_edge": high}
        else:
            options.update(min_pixels=low, max_pixels=high)
        return options

    def _patch_grid_options(self) -> dict[str, Any]:
        """The image processor of images sized in patches (MiniCPM-V's): the tiny patch side, and images scaled
        to about the tiny image's area (``scale_resolution``), whichever of the two it declares."""
        defaults = self.image_processor_class()
        options = {"patch_size": VISION_SIZES["patch_size"], "scale_resolution": IMAGE_SIDE}
        return {name: value for name, value in options.items() if hasattr(defaults, name)}

    def _features_per_image(self, config: PreTrainedConfig) -> int:
        """How many feature rows upstream's ``get_image_features`` gives one tiny image; for a model that tiles
        its images, one tile's: the tower's tokens, less the one a "default" feature strategy drops."""
        upstream = get_model_class(self.model_type, self.causal_lm, use_hf=True)
        seed_everything(0)
        model = upstream(config).eval()
        # Ones, not zeros: a model that pads rows of fewer images with all-zero ones drops those (Idefics3's).
        pixels = torch.ones(1, config.vision_config.num_channels, self.image_side, self.image_side)
        if self.image_rows:
            pixels = pixels[None]
        if getattr(config, TILING, None):
            with torch.no_grad():
                tokens = getattr(model.model, self.tower)(pixel_values=pixels).last_hidden_state.shape[1]
            return int(tokens) - (1 if getattr(config, "vision_feature_select_strategy", None) == "default" else 0)
        sizes = {}
        sized = inspect.signature(model.model.get_image_features).parameters.get("image_sizes")
        if sized is not None and sized.default is inspect.Parameter.empty:  # required (Pixtral's towers)
            sizes["image_sizes"] = torch.tensor([[IMAGE_SIDE, IMAGE_SIDE]])
        with torch.no_grad():
            out = model.model.get_image_features(pixel_values=pixels, return_dict=True, **sizes).pooler_output
        first = out[0] if isinstance(out, (list, tuple)) else out
        return int(first.shape[-2]) if first.dim() == 3 else int(first.shape[0])

    def _count_options(self, signature: inspect.Signature, config: PreTrainedConfig, count: int) -> dict[str, Any]:
        options: dict[str, Any] = {}
        names = signature.parameters
        merge = getattr(config, "spatial_merge_size", None) or getattr(
            config.vision_config, "spatial_merge_size", None
        )
        if "patch_size" in names and "spatial_merge_size" in names and merge:
            # Pixtral's count: (side / (patch * merge)) ** 2 for each image, whatever its size.
            options["patch_size"] = config.vision_config.patch_size
            options["spatial_merge_size"] = merge
        elif "patch_size" in names and "num_additional_image_tokens" in names:
            # LLaVA's count: the tower's patches, plus its extra tokens, less the one a "default" strategy drops.
            options["patch_size"] = config.vision_config.patch_size
        elif "patch_size" in names and math.isqrt(count) ** 2 == count and IMAGE_SIDE % math.isqrt(count) == 0:
            # A count of (side / patch) ** 2 per image, after any downsampling the model applies.
            options["patch_size"] = IMAGE_SIDE // math.isqrt(count)
        for name in ("img_size", "image_size"):
            if name in names:
                options[name] = IMAGE_SIDE
        strategy = getattr(config, "vision_feature_select_strategy", None)
        if "vision_feature_select_strategy" in names and strategy is not None:
            options["vision_feature_select_strategy"] = strategy
        if "num_additional_image_tokens" in names:
            patches = (IMAGE_SIDE // config.vision_config.patch_size) ** 2
            dropped = 1 if getattr(config, "vision_feature_select_strategy", None) == "default" else 0
            options["num_additional_image_tokens"] = count - patches + dropped
        for name in COUNT_OPTIONS:
            if name in names:
                options[name] = count
        if "size_conversion" in names:  # Aria's count per image, keyed on the side its images are padded to
            options["size_conversion"] = {self.image_side: count}
        return options

    def config(self) -> PreTrainedConfig:
        """A fresh copy of the tiny config (tests change theirs)."""
        return copy.deepcopy(self._parts[0])

    def batch(
        self,
        config: PreTrainedConfig,
        images_per_row: tuple[int, ...],
        *,
        trailing_words: int = 0,
        first_row: int = 0,
    ) -> dict[str, Any]:
        """The processor's outputs for rows of words holding that many images of different sizes; labels ignore
        padding and the image placeholders, and a head whose aux loss the scaffold guards is asked for its router
        logits, so every step computes (and compares) the aux loss. ``trailing_words`` more words end each row (a long text after the
        images: a sequence-parallel slice without placeholders); ``first_row`` numbers the rows from there (a data
        rank's share of a larger batch: its rows are that batch's rows)."""
        processor = self._parts[1]
        # What a prompt holds per image: the processor's placeholder, which some expand into other tokens
        # (qianfan_ocr's "<image>" into "<img>", the context tokens and "</img>").
        placeholder = getattr(processor, "image_placeholder_token", None) or processor.image_token
        texts, images = [], []
        for row, count in enumerate(images_per_row, start=first_row):
            parts = [f"w{row} w{row + 7}"] + [f"{placeholder} w{row + i + 20}" for i in range(count)]
            texts.append(" ".join(parts + [f"w{(i % 20) + 40}" for i in range(3 + 2 * row + trailing_words)]))
            images.append([synthetic_image(20 + 9 * i, 36 - 5 * i, seed=10 * row + i) for i in range(count)])
        flat = [image for row in images for image in row]
        if flat:  # a processor of image rows (SmolVLM's) takes each row's images as a list of their own
            given = images if self.image_rows else flat
            inputs = processor(text=texts, images=given, return_tensors="pt", padding=True)
        else:  # text alone is the tokenizer's (GOT-OCR2's processor refuses a call without images)
            inputs = processor.tokenizer(texts, return_tensors="pt", padding=True)
        batch = dict(inputs)
        ignored = (batch["attention_mask"] == 0) | (batch["input_ids"] == config.image_token_id)
        batch["labels"] = batch["input_ids"].masked_fill(ignored, IGNORE_INDEX)
        if "load_balancing_loss" in self.guarded:  # the head computes its aux loss only when asked (MiniMax-M3-VL)
            batch["output_router_logits"] = True
        return batch

    def declaration(self) -> ComposedVlm:
        """The composed suite's declaration of this model."""
        return ComposedVlm(
            model_type=self.model_type,
            architecture=self.causal_lm,
            config=self.config,
            batch=self.batch,
            guarded=self.guarded,
            tower=self.tower,
            language_model=self.language_model,
        )


class ScaffoldComposedSuite(ComposedVlmSuite):
    """The composed suite over a :class:`ScaffoldComposedVlm` (``scaffold``, set by the test class)."""

    scaffold: ScaffoldComposedVlm

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "scaffold" in cls.__dict__:
            cls.model = cls.scaffold.declaration()

    def test_towers_are_the_generated_classes_of_their_sub_configs(self) -> None:
        """Each tower is a generated class: this module's own (a tower class the module builds itself), or the
        class registered for its sub-config's model_type."""
        config = self.model.config()
        model = get_model_class(self.model.model_type, self.model.architecture)(config)
        for attr, sub_config in ((self.model.tower, "vision_config"), (self.model.language_model, "text_config")):
            cls = type(getattr(model.model, attr))
            assert cls.__module__ in MODELING_REGISTRY.module_paths(), (attr, cls)  # generated, not upstream's
            if cls.__module__ != type(model).__module__:
                assert cls is sub_model_class(getattr(config, sub_config)), (attr, cls)

    @pytest.mark.parametrize("slot", ["layer_norm", "activation", "rms_norm"])
    def test_one_tower_slot_bound_alone_matches_upstream_in_bf16(self, slot: str) -> None:
        """As the composed suite's, for each slot the built model consults (the towers' packages' guards too)."""
        config = self.model.config()
        model = get_model_class(self.model.model_type, self.model.architecture)(config)
        if slot not in consulted_slots(getattr(model.model, self.model.tower)):
            pytest.skip(f"the vision tower of {self.model.architecture} consults no {slot} slot")
        config, batch = self._batch("one-image-per-row")
        check_parity(
            config,
            self.model.architecture,
            batch=in_dtype(batch, torch.bfloat16),
            kernels=reference_kernels([slot]),
            dtype=torch.bfloat16,
            tolerance=tolerance_for(torch.bfloat16, kernels=False),
            logits="close",
        )

    def test_a_text_only_row_beside_an_image_row_matches_upstream(self) -> None:
        """One row with an image and one without, in one batch: the text row's share of the images is what the
        processor pads it with (all-zero images where images come in rows per sample, which Idefics3's
        get_image_features drops), and the step is upstream's."""
        config = self.model.config()
        check_parity(config, self.model.architecture, batch=self.scaffold.batch(config, (1, 0)))

    def test_each_half_of_the_sequence_scatters_the_image_features_of_its_own_placeholders(self) -> None:
        """Sequence parallelism of two ranks, in one process: with the placeholder_features slot bound to a kernel
        that keeps the features of one half's placeholders (as the sp kernel does from the ranks' masks), each half
        of the ids, with the whole batch's images, hands its language model that half of the embeddings the whole
        sequence gets: the features reach this rank's placeholders through upstream's own scatter
        (get_placeholder_mask, or Idefics3's inputs_merger)."""
        config, batch = self._batch("several-images-in-a-row")
        model = generated_from_upstream(self.model, config)
        language_model = getattr(model.model, self.model.language_model)
        assert_each_half_scatters_its_own_placeholders(model, language_model, batch, config.image_token_id)

    def test_packed_documents_each_get_the_logits_they_get_alone(self) -> None:
        """A row packing a text-only document and an image document, 1-D positions restarting at each and no
        attention mask, with the config's use_cache on: each document's logits are those it gets alone, on eager
        attention (the generated forward turns the cache off, so the mask builder sees the documents). A Gated
        DeltaNet text model (MiniCPM-V 4.6's Qwen3.5) also gets the documents' boundaries, on the chunked_delta
        kernels, as its own suite packs them."""
        config = self.model.config()
        text, image = (self.scaffold.batch(config, (count,)) for count in (0, 1))
        generated = generated_from_upstream(self.model, config)
        lengths = [text["input_ids"].shape[1], image["input_ids"].shape[1]]
        packed = {key: value for key, value in image.items() if key not in ("input_ids", "attention_mask", "labels")}
        packed["input_ids"] = torch.cat((text["input_ids"], image["input_ids"]), dim=1)
        packed["position_ids"] = packed_text_position_ids(lengths)
        boundaries = packed_document_kwargs(config.get_text_config(), lengths)
        with torch.no_grad():
            alone = [generated(**{k: v for k, v in doc.items() if k != "labels"}).logits[0] for doc in (text, image)]
            with bound_ops(packed_document_ops(config.get_text_config())):
                together = generated(**packed, **boundaries).logits
        assert generated.config.text_config.use_cache
        torch.testing.assert_close(together[0, : lengths[0]], alone[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(together[0, lengths[0] :], alone[1], rtol=1e-5, atol=1e-5)

    def test_reference_kernels_in_every_slot_match_upstream(self) -> None:
        """Every slot the built model consults bound to its reference kernel, each one called: the module's own
        guards, and those of both towers' packages; the step still equals upstream's. The decode-only slots of a
        Gated DeltaNet text model are its own package's to check, on a cached decode step."""
        config, batch = self._batch("one-image-per-row")
        model = get_model_class(self.model.model_type, self.model.architecture)(config)
        slots = training_step_slots(model)
        for attr in (self.model.tower, self.model.language_model):
            assert consulted_slots(getattr(model.model, attr)), f"self.{attr} consults no op slot"
        assert set(self.model.guarded) <= slots, set(self.model.guarded) - slots
        _, candidate = check_parity(
            config,
            self.model.architecture,
            batch=batch,
            kernels=reference_kernels(sorted(slots)),
            tolerance=tolerance_for(torch.float32, kernels=False),
            logits="close",
        )
        assert set(candidate.calls) == slots


def assert_each_half_scatters_its_own_placeholders(
    model: torch.nn.Module, language_model: torch.nn.Module, batch: Mapping[str, Any], placeholder_id: int
) -> None:
    """Two sequence-parallel ranks in one process: with the placeholder_features slot bound to a kernel that keeps
    the features of one half's placeholders (``input_ids == placeholder_id``), as the sp kernel does from the ranks'
    masks, each half of the ids, with the whole batch's tower inputs, hands ``language_model`` that half of the
    embeddings the whole sequence gets."""
    received: list[torch.Tensor] = []
    language_model.register_forward_pre_hook(
        lambda _, args, kwargs: received.append(kwargs["inputs_embeds"]), with_kwargs=True
    )
    inputs = {key: value for key, value in batch.items() if key != "labels"}
    ids = inputs["input_ids"]
    whole_mask = ids == placeholder_id
    ordinals = whole_mask.flatten().cumsum(0).view(whole_mask.shape) - 1
    with torch.no_grad():
        model(**inputs, use_cache=False)
        whole = received[-1]
        half = -(-ids.shape[1] // 2)
        for window in (slice(0, half), slice(half, ids.shape[1])):

            def this_half(mask: torch.Tensor, features: torch.Tensor, window: slice = window) -> torch.Tensor:
                local = mask[..., 0] if mask.dim() == 3 else mask
                return features[ordinals[:, window][local.bool()]]

            local = {key: value[:, window] for key, value in inputs.items() if key in ("input_ids", "attention_mask")}
            with _kernels_bound({"placeholder_features": this_half}):
                model(**{**inputs, **local}, use_cache=False)
            assert torch.equal(received[-1], whole[:, window])
