"""The Omni declaration a scaffold's tests hold: tiny sizes derived from the model's own config classes.

A zoo Omni model's test file spells out its tiny text, vision, audio and speech sizes
(``modelgraft.models.testing.omni_suite``). A scaffold (``copier copy``, category ``omni``) is written for a model
no one has sized by hand, so :class:`ScaffoldOmni` derives them at run time, by the rules the VLM scaffolds use
(``modelgraft.models.testing.scaffold_vlm``):

- the thinker's text and vision sizes as a VLM scaffold's (:func:`tiny_text_sizes`, :func:`tiny_vision_sizes`);
- the audio tower's, for the attributes its config class declares (:data:`AUDIO_SIZES`), its output width the text
  decoder's;
- the speech side's (a talker, and token2wav or code2wav), for the whole-model checkpoint tests: each speech config
  class and its own sub-configs get :data:`SPEECH_SIZES` for the attributes they declare, the talker's input width
  the thinker's, its RoPE sections scaled to its rotary width.

The special tokens are Qwen-Omni's (the Omni suite's tokenizer): the omni fit copies only Qwen-Omni-like models.
:class:`ScaffoldOmniParitySuite` is the Omni suite with the module-tree check a scaffold can make: every module of
a built model is a class of the generated file, a torch layer or a transformers activation module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from transformers import PreTrainedConfig

from modelgraft.models.loader import build_model
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.omni_suite import OmniModel, OmniParitySuite
from modelgraft.models.testing.scaffold_vlm import (
    KEPT_UPSTREAM_PACKAGES,
    _fields,
    _scaled_sections,
    tiny_text_sizes,
    tiny_vision_sizes,
)
from modelgraft.models.testing.vlm_suite import module_classes_outside

__all__ = ["AUDIO_SIZES", "SPEECH_SIZES", "ScaffoldOmni", "ScaffoldOmniParitySuite", "tiny_audio_sizes"]

#: Tiny audio-tower sizes, for whichever of these attributes the audio config class declares: 16 mel bins, 2 layers
#: of width 24, attention chunks of 16 mel frames (``n_window`` 8), so the suite's 0.3 s clip spans two chunks.
AUDIO_SIZES: Mapping[str, Any] = {
    "num_mel_bins": 16,
    "d_model": 24,
    "encoder_attention_heads": 2,
    "encoder_layers": 2,
    "encoder_ffn_dim": 40,
    "n_window": 8,
    "max_source_positions": 64,
}

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
}


def _declared(config_class: type[PreTrainedConfig]) -> set[str]:
    return _fields(config_class) or set(config_class().to_dict())


def tiny_audio_sizes(config_class: type[PreTrainedConfig], text_hidden: int) -> dict[str, Any]:
    """The tiny audio config: :data:`AUDIO_SIZES` for the attributes the audio config class declares, and its
    output width (``output_dim``) the text decoder's ``text_hidden``."""
    audio_class = config_class.sub_configs["audio_config"]
    declared = _declared(audio_class)
    sizes = {name: value for name, value in AUDIO_SIZES.items() if name in declared}
    if "output_dim" in declared:
        sizes["output_dim"] = text_hidden
    return sizes


def _tiny_speech_config(config_class: type[PreTrainedConfig], text_hidden: int) -> dict[str, Any]:
    """:data:`SPEECH_SIZES` for what ``config_class`` declares, recursively for its sub-configs."""
    declared = _declared(config_class)
    sizes = {name: value for name, value in SPEECH_SIZES.items() if name in declared}
    if "embedding_size" in declared:
        sizes["embedding_size"] = text_hidden
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


@dataclasses.dataclass(frozen=True)
class ScaffoldOmni(OmniModel):
    """An :class:`OmniModel` whose sizes come from upstream's config classes (see the module docstring)."""

    text_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    vision_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.text_config:
            object.__setattr__(self, "text_config", tiny_text_sizes(self.config_class))
        hidden = self.text_config["hidden_size"]
        if not self.vision_config:
            object.__setattr__(self, "vision_config", tiny_vision_sizes(self.config_class, hidden))
        if not self.audio_config:
            object.__setattr__(self, "audio_config", tiny_audio_sizes(self.config_class, hidden))
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
