"""The Omni declaration a scaffold's tests hold: tiny sizes derived from the model's own config classes.

A zoo Omni model's test file spells out its tiny text, vision, audio and speech sizes
(``modelgraft.models.testing.omni_suite``). A scaffold (``copier copy``, category ``omni``) is written for a model
no one has sized by hand, so :class:`ScaffoldOmni` derives them at run time, by the rules the VLM scaffolds use
(``modelgraft.models.testing.scaffold_vlm``):

- the thinker's text and vision sizes as a VLM scaffold's (:func:`tiny_text_sizes`, :func:`tiny_vision_sizes`);
- the audio tower's, for the attributes its config class declares (:data:`AUDIO_SIZES`), its output width the text
  decoder's; where the processor pins the chunk size it counts audio placeholders with (Qwen3-Omni's
  ``n_window``: its length formula holds for that chunk size only), the tower's chunk
  is the processor's, its attention windows one chunk, and the sample clips long enough to span two chunks;
- the special tokens' config keys from the config class: ``*_token_index`` where it declares that name
  (Qwen2.5-Omni), else ``*_token_id`` (Qwen3-Omni); the thinker's ``position_id_per_seconds`` the processor's
  default, which is the rate its video placeholders are laid out at;
- the speech side's (a talker, and token2wav or code2wav), for the whole-model checkpoint tests: each speech config
  class and its own sub-configs get :data:`SPEECH_SIZES` for the attributes they declare, the talker's input width
  the thinker's, its RoPE sections scaled to its rotary width.

The special tokens are Qwen-Omni's (the Omni suite's tokenizer): the omni fit copies only Qwen-Omni-like models.
:class:`ScaffoldOmniParitySuite` is the Omni suite with the module-tree check a scaffold can make: every module of
a built model is a class of the generated file, a torch layer or a transformers activation module.
:class:`ScaffoldOmniMoe` / :class:`ScaffoldOmniMoeParitySuite` are the same over the Omni-MoE suite (category
``omni_moe``: router logits in every batch, eager experts, the per-expert checkpoints through the converter).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from transformers import PreTrainedConfig, ProcessorMixin

from modelgraft.models.loader import build_model
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.omni_moe_suite import OmniMoeModel, OmniMoeParitySuite
from modelgraft.models.testing.omni_processor import SAMPLING_RATE
from modelgraft.models.testing.omni_suite import OmniModel, OmniParitySuite
from modelgraft.models.testing.scaffold_vlm import (
    KEPT_UPSTREAM_PACKAGES,
    VISION_SIZES,
    _fields,
    _scaled_sections,
    tiny_text_sizes,
    tiny_vision_sizes,
)
from modelgraft.models.testing.vlm_suite import module_classes_outside

__all__ = [
    "AUDIO_SIZES",
    "SPEECH_SIZES",
    "ScaffoldOmni",
    "ScaffoldOmniMoe",
    "ScaffoldOmniMoeParitySuite",
    "ScaffoldOmniParitySuite",
    "tiny_audio_sizes",
]

#: Tiny audio-tower sizes, for whichever of these attributes the audio config class declares: 16 mel bins, 2 layers
#: of width 24, attention chunks of 16 mel frames (``n_window`` 8), so the suite's 0.3 s clip spans two chunks;
#: Qwen3-Omni's Conv2d tower with 8 channels run one chunk at a time (``conv_chunksize`` 1).
AUDIO_SIZES: Mapping[str, Any] = {
    "num_mel_bins": 16,
    "d_model": 24,
    "encoder_attention_heads": 2,
    "encoder_layers": 2,
    "encoder_ffn_dim": 40,
    "n_window": 8,
    "max_source_positions": 64,
    "downsample_hidden_size": 8,
    "conv_chunksize": 1,
}

#: The feature extractor's hop between mel frames (Whisper's, ``omni_processor.whisper_features``).
HOP_LENGTH = 160


#: The special tokens' config keys as Qwen2.5-Omni's thinker config names them (the Omni suite's default); a config
#: class that does not declare a ``*_token_index`` name gets its ``*_token_id`` name (Qwen3-Omni's).
def _suite_default(name: str) -> Any:
    """The Omni suite's default of an :class:`OmniModel` field: what a zoo declaration that sets none gets."""
    found = next(field for field in dataclasses.fields(OmniModel) if field.name == name)
    return found.default_factory()  # type: ignore[misc]


TOKEN_ID_KEYS: Mapping[str, str] = _suite_default("token_id_keys")

#: Tiny speech-side sizes, for whichever of these attributes a speech config (or one of its sub-configs: a DiT, a
#: vocoder) declares. The talker's input width (``embedding_size``) is the thinker's text width, set apart.
SPEECH_SIZES: Mapping[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 40,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "vocab_size": 64,
    "emb_dim": 16,
    "num_embeds": 64,
    "mel_dim": 8,
    "enc_emb_dim": 16,
    "enc_dim": 16,
    "enc_channels": [16, 16, 16, 16, 48],
    "enc_attention_channels": 8,
    "enc_se_channels": 8,
    "look_ahead_layers": [1],
    "look_backward_layers": [0],
    "block_size": 4,
    "upsample_initial_channel": 16,
    "resblock_kernel_sizes": [3],
    "resblock_dilation_sizes": [[1, 3, 5]],
    "upsample_rates": [2],
    "upsample_kernel_sizes": [4],
    # Qwen3-Omni's MoE talker, its code predictor and its code2wav vocoder
    "num_experts": 3,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "num_code_groups": 2,
    "codebook_size": 64,
    "num_quantizers": 2,
    "upsampling_ratios": [2],
    "decoder_dim": 16,
}


#: Sizes upstream's speech modules read from a config class that does not declare them, by an attribute that
#: class does declare: Qwen3-Omni's MoE talker text model builds a shared expert of
#: ``shared_expert_intermediate_size``, and its talker (fed the thinker's ``thinker_hidden_size``) lays out its
#: position ids by the vision tower's ``spatial_merge_size`` (its ``get_rope_index``).
UNDECLARED_SPEECH_SIZES: Mapping[str, Mapping[str, Any]] = {
    "num_experts": {"shared_expert_intermediate_size": 24},
    "thinker_hidden_size": {"spatial_merge_size": VISION_SIZES["spatial_merge_size"]},
}


def _declared(config_class: type[PreTrainedConfig]) -> set[str]:
    return _fields(config_class) or set(config_class().to_dict())


def processor_default(processor_class: type[ProcessorMixin] | None, kind: str, name: str) -> Any:
    """The processor's own default of ``name`` (None: it has none): a class attribute its call falls back to
    (transformers 5.25's Omni processors: ``n_window``, ``position_id_per_seconds``), else the default of its
    ``kind`` keyword arguments (``audio_kwargs``, ``videos_kwargs``), as its call merges them."""
    value = getattr(processor_class, name, None)
    if value is not None:
        return value
    kwargs = getattr(processor_class, "valid_processor_kwargs", None)
    return ((getattr(kwargs, "_defaults", None) or {}).get(kind) or {}).get(name)


def tiny_audio_sizes(
    config_class: type[PreTrainedConfig], text_hidden: int, processor_class: type[ProcessorMixin] | None = None
) -> dict[str, Any]:
    """The tiny audio config: :data:`AUDIO_SIZES` for the attributes the audio config class declares, and its
    output width (``output_dim``) the text decoder's ``text_hidden``.

    A processor that counts each clip's placeholders for a chunk size of its own (an ``n_window`` default,
    Qwen3-Omni's) gets a tower of that chunk size, or the placeholders would not match the
    tower's output; its attention windows (``n_window_infer``) are then one chunk, two ``n_window``.
    """
    audio_class = config_class.sub_configs["audio_config"]
    declared = _declared(audio_class)
    sizes = {name: value for name, value in AUDIO_SIZES.items() if name in declared}
    pinned = processor_default(processor_class, "audio_kwargs", "n_window")
    if pinned is not None and "n_window" in declared:
        sizes["n_window"] = pinned
        if "n_window_infer" in declared:
            sizes["n_window_infer"] = 2 * pinned
    if "output_dim" in declared:
        sizes["output_dim"] = text_hidden
    return sizes


def tiny_clips(audio_sizes: Mapping[str, Any]) -> tuple[tuple[float, float, float], int]:
    """The sample clips' lengths (audio row, mixed row, audio-in-video row) and the seconds the feature extractor
    pads them to: the audio row spans two of the tower's chunks (``2 * n_window`` mel frames each)."""
    chunk = 2 * audio_sizes.get("n_window", AUDIO_SIZES["n_window"]) * HOP_LENGTH / SAMPLING_RATE
    longest = round(1.3 * chunk, 2)
    if longest <= 0.3:  # the Omni suite's own clips already span two chunks
        return (0.3, 0.2, 0.3), 1
    return (longest, 0.2, 0.3), math.ceil(longest)


def token_id_keys(config_class: type[PreTrainedConfig]) -> dict[str, str]:
    """Each special token's config key: :data:`TOKEN_ID_KEYS`, a ``*_token_index`` the config class does not declare
    read as its ``*_token_id``."""
    declared = _declared(config_class)
    keys = {}
    for token, key in TOKEN_ID_KEYS.items():
        other = key.removesuffix("_index") + "_id"
        keys[token] = other if key.endswith("_index") and key not in declared and other in declared else key
    return keys


def tiny_top_level_sizes(
    config_class: type[PreTrainedConfig], processor_class: type[ProcessorMixin] | None
) -> dict[str, Any]:
    """The thinker config's own values: ``position_id_per_seconds`` the processor's default, where both have it
    (the processor lays a video's placeholders out at that rate, the thinker's positions must follow it)."""
    rate = processor_default(processor_class, "videos_kwargs", "position_id_per_seconds")
    if rate is None or "position_id_per_seconds" not in _declared(config_class):
        return {}
    return {"position_id_per_seconds": int(rate) if float(rate).is_integer() else rate}


def _tiny_speech_config(config_class: type[PreTrainedConfig], text_hidden: int) -> dict[str, Any]:
    """:data:`SPEECH_SIZES` for what ``config_class`` declares, recursively for its sub-configs."""
    declared = _declared(config_class)
    sizes = {name: value for name, value in SPEECH_SIZES.items() if name in declared}
    for name, extra in UNDECLARED_SPEECH_SIZES.items():
        if name in declared:
            sizes.update({key: value for key, value in extra.items() if key not in declared})
    for width in ("embedding_size", "thinker_hidden_size"):  # the talker's input: the thinker's text width
        if width in declared:
            sizes[width] = text_hidden
    rope = dict(getattr(config_class(), "rope_parameters", None) or {})
    if "mrope_section" in rope:
        half = sizes.get("head_dim", SPEECH_SIZES["head_dim"]) // 2
        rope.update(
            rope_type="default", rope_theta=10000.0, mrope_section=_scaled_sections(rope["mrope_section"], half)
        )
        sizes["rope_parameters"] = rope
    for key, sub in (getattr(config_class, "sub_configs", None) or {}).items():
        sizes[key] = _tiny_speech_config(sub, text_hidden)
    return sizes


def _derive(declaration: Any) -> None:
    """Fill the declaration's empty sizes, clips and token keys from its config and processor classes."""
    config_class, processor_class = declaration.config_class, declaration.processor_class
    if not declaration.text_config:
        object.__setattr__(declaration, "text_config", tiny_text_sizes(config_class))
    hidden = declaration.text_config["hidden_size"]
    if not declaration.vision_config:
        object.__setattr__(declaration, "vision_config", tiny_vision_sizes(config_class, hidden))
    if not declaration.audio_config:
        object.__setattr__(declaration, "audio_config", tiny_audio_sizes(config_class, hidden, processor_class))
    if not declaration.clip_seconds:
        clips, padding = tiny_clips(declaration.audio_config)
        object.__setattr__(declaration, "clip_seconds", clips)
        object.__setattr__(declaration, "audio_padding_seconds", declaration.audio_padding_seconds or padding)
    if not declaration.token_id_keys:
        object.__setattr__(declaration, "token_id_keys", token_id_keys(config_class))
    top = tiny_top_level_sizes(config_class, processor_class)
    object.__setattr__(declaration, "sizes", {**top, **declaration.sizes})


@dataclasses.dataclass(frozen=True)
class ScaffoldOmni(OmniModel):
    """An :class:`OmniModel` whose sizes come from upstream's config classes (see the module docstring)."""

    text_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    vision_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: Empty: derived from the audio tower's sizes (:func:`tiny_clips`), as are the feature extractor's seconds (0).
    clip_seconds: tuple[float, ...] = ()
    audio_padding_seconds: int = 0
    #: Empty: derived from the config class (:func:`token_id_keys`).
    token_id_keys: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        _derive(self)
        hidden = self.text_config["hidden_size"]
        if not self.speech and self.top_level_config_class is not None:
            subs = self.top_level_config_class.sub_configs
            speech = {
                name.removesuffix("_config"): _tiny_speech_config(sub, hidden)
                for name, sub in subs.items()
                if name != "thinker_config"
            }
            object.__setattr__(self, "speech", speech)
        super().__post_init__()


class ScaffoldOmniParitySuite(OmniParitySuite):
    """The Omni suite for a scaffold's :class:`ScaffoldOmni` declaration."""

    def test_every_module_is_generated_or_deliberately_left_upstream(self, backend: str) -> None:
        """Every module outside the generated file is a torch layer or an activation module (KEPT_UPSTREAM_PACKAGES)."""
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend)
        outside = module_classes_outside(model, MODELING_REGISTRY.module_path(self.model.model_type, backend))
        assert {name for name in outside if not name.startswith(KEPT_UPSTREAM_PACKAGES)} == set()

    #: The zoo's hand-kept list has no counterpart here: a scaffold keeps upstream's modules by package.
    test_every_module_left_upstream_is_in_the_model = None


@dataclasses.dataclass(frozen=True)
class ScaffoldOmniMoe(ScaffoldOmni, OmniMoeModel):
    """:class:`ScaffoldOmni` over the Omni-MoE declaration (router logits in every batch, eager experts)."""


class ScaffoldOmniMoeParitySuite(ScaffoldOmniParitySuite, OmniMoeParitySuite):
    """The Omni-MoE suite for a scaffold's :class:`ScaffoldOmniMoe` declaration."""
