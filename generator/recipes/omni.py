"""The Omni recipe (Qwen2.5-Omni): the thinker as training modeling, the speech side left out.

An Omni model of transformers 5.25 is a thinker, a talker and a token2wav vocoder, wrapped by a top-level class whose
only job is generation with audio output. The thinker is built as a Qwen-VL model is: ``<Prefix>ThinkerModel``
holds the audio tower, the vision tower and the text decoder (``self.audio_tower``, ``self.visual``,
``self.language_model``), scatters the towers' features into the placeholders and computes the multimodal
positions (``compute_3d_position_ids``); ``<Prefix>ThinkerForConditionalGeneration`` holds it as ``self.model``
with the ``lm_head``. This module keeps the thinker and builds on the VLM recipe's pieces:

- the text and vision guards of :func:`modelgraft.generator.recipes.vlm.vlm` (``norms``, ``mlps``, ``call_sites``,
  the text RoPE, the vision RoPE behind ``rope_vision`` in either of its forms), ``vlm_vision_dummy_forward`` on the
  vision tower;
- ``vlm_sequence_parallel_forward`` on the thinker model's forward (audio, image and video features of this rank's
  placeholders, dummy towers, dict masks) and the fused-loss head on the thinker (``causal_lm_loss_guard``), as the
  VLM recipe applies them to ``<Prefix>Model`` and ``<Prefix>ForConditionalGeneration``;
- ``omni_audio_dummy_forward`` on the audio tower: a zero loss term through it, for ranks without audio;
- ``omni_position_id_func`` plus :func:`omni_rope_index_without_model`, on the thinker model and the thinker:
  upstream's ``get_rope_index`` (audio and audio-in-video included) as a picklable function, also for text-only
  batches without an attention mask;
- ``vlm_packed_documents_guard`` on the thinker's text model, as for a VLM: packed documents kept apart on eager
  and sdpa attention;
- ``omni_metadata_collate_func`` on the thinker model and the thinker: the VLM collator step precomputing the
  vision tower's packing metadata, plus what the audio tower computes per forward from the clips and takes
  precomputed through the thinker (``modelgraft.models.vision_metadata.omni_metadata``);
- ``exclude_from_output`` of the speech classes (``speech_classes``) and everything only they used; a kept member
  that names one (an ``_init_weights`` branch) must be patched by the config, or check 1 stops generation;
- ``omni_thinker_only_model`` replaces the top-level class: the thinker alone, a load_state_dict pre-hook
  (:func:`drop_speech_weights`) and ignore patterns for the speech side's checkpoint keys, strict loading without
  the speaker dictionary, and the members that only serve audio output (``refused``) raising;
- the base class's checkpoint conversions, strict loading and attention on request, as for every model.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from modelgraft.generator.dsl.config import PatchConfig
from modelgraft.generator.recipes.dense import (
    _named,
    apply_call_sites,
    apply_causal_lm,
    apply_mlps,
    apply_norms,
    apply_pretrained_model,
    apply_rope,
    apply_upstream_version_check,
)
from modelgraft.generator.recipes.parts import CallSites, LossHead, Mlp, Norm, Rope
from modelgraft.generator.recipes.vlm import VisionTower, apply_packed_documents, apply_sequence_parallel_forward

__all__ = ["REFUSED", "AudioTower", "drop_speech_weights", "omni", "omni_rope_index_without_model"]


@dataclass(frozen=True)
class AudioTower:
    """The audio encoder of an Omni thinker: the class that gets ``dummy_forward``.

    ``input_weight`` is the expression, inside the encoder, of its first convolution's weight (dtype and device of
    the blank clip); ``mel_bins`` the expression of the clip's mel bins (the Conv1d weight's input channels for
    Qwen2.5-Omni; ``self.num_mel_bins`` where the first convolution is a one-channel Conv2d, Qwen3-Omni);
    ``frames`` the expression of the clip's length in mel frames.
    """

    cls: str
    input_weight: str = "self.conv1.weight"
    mel_bins: str = "weight.shape[1]"
    frames: str = "2 * self.n_window"


def omni_rope_index_without_model(
    model_class: Any, config: Any, attributes: dict[str, Any], *args: Any, **kwargs: Any
) -> Any:
    """``model_class.get_rope_index(*args, **kwargs)`` with ``config`` and ``attributes``, without building a model.

    Upstream's ``get_rope_index`` (of the thinker model's and the thinker's common base class) reads
    ``self.config``, the ``attributes`` (``spatial_merge_size``) and helper methods that read nothing else: an
    instance made without ``__init__`` holding them is all it needs, so the position ids are upstream's own code,
    not a copy. The attention mask is unwrapped from a dict by attention type, as the model's forward does; a
    missing one counts every token (for a multimodal batch that is what upstream does without one; its text-only
    branch would fail on ``None``).
    """
    owner = object.__new__(model_class)
    owner.__dict__["config"] = config
    owner.__dict__.update(attributes)
    bound = inspect.signature(model_class.get_rope_index).bind(owner, *args, **kwargs)
    mask = bound.arguments.get("attention_mask")
    if isinstance(mask, dict):
        mask = mask.get("full_attention")
    if mask is None:
        input_ids = bound.arguments["input_ids"]
        mask = input_ids.new_ones(input_ids.shape)
    bound.arguments["attention_mask"] = mask
    return model_class.get_rope_index(*bound.args, **bound.kwargs)


def drop_speech_weights(prefixes: tuple[str, ...], module: Any, state_dict: Any, prefix: str, *args: Any) -> None:
    """A load_state_dict pre-hook: remove the speech side's keys (``prefixes`` under ``prefix``) from ``state_dict``.

    A checkpoint of the whole Omni model holds the talker's and token2wav's weights, which this module does not
    build; dropped here, the rest loads strictly, and a thinker weight the checkpoint lacks still fails the load
    and is named by it.
    """
    for key in [key for key in state_dict if key.startswith(tuple(prefix + name for name in prefixes))]:
        del state_dict[key]


#: The top-level members of Qwen2.5-Omni that only serve audio output, and what each does (for its error).
REFUSED: Mapping[str, str] = MappingProxyType(
    {"generate": "generation", "enable_talker": "audio output", "load_speakers": "speaker loading"}
)


def omni(
    config: PatchConfig,
    *,
    prefix: str,
    vision: VisionTower,
    audio: AudioTower,
    speech_classes: Sequence[str],
    norms: Sequence[Norm] = (Norm(),),
    mlps: Sequence[Mlp] = (Mlp(),),
    call_sites: Sequence[CallSites] = (),
    rope: str | Rope | None = None,
    mrope: str | None = None,
    causal_lm: LossHead = LossHead("{prefix}ThinkerForConditionalGeneration"),
    model: str = "{prefix}ThinkerModel",
    text_model: str | None = "{prefix}ThinkerTextModel",
    aux_loss: str = "",
    top_level: str = "{prefix}ForConditionalGeneration",
    speech: Sequence[str] = ("talker", "token2wav"),
    refused: Mapping[str, str] = REFUSED,
    rope_index_attributes: Sequence[str] = ("spatial_merge_size",),
    pretrained_model: str | None = "{prefix}PreTrainedModel",
) -> PatchConfig:
    """Apply the Omni snippets to ``config`` for the model whose classes start with ``prefix``; thinker only.

    The defaults are Qwen2.5-Omni's. ``speech_classes`` are excluded with whatever only they used; ``speech``
    names the top-level attributes that held them (their checkpoint keys are dropped on load); ``refused`` maps
    each top-level member that only serves audio output to what it does, for its error. ``causal_lm`` is the
    thinker (the head: logits and loss), ``model`` the thinker model it holds as ``self.model`` (the towers, the
    features' scatter and the positions), whose ``get_rope_index`` the position-id function runs with
    ``rope_index_attributes``, and ``text_model`` its text decoder, whose forward reads the packed ``[4, B, L]``
    layout (None: no guard). ``rope`` and ``mrope`` mean what they mean for
    :func:`modelgraft.generator.recipes.vlm.vlm` (every Qwen-Omni thinker of transformers 5.25 sections the positions
    in its rotary embedding and calls a plain ``rope`` function); ``aux_loss`` names the MoE auxiliary-loss function
    the thinker calls ("" for a dense text decoder; :func:`modelgraft.generator.recipes.omni_moe.omni_moe`).
    """
    config.exclude_from_output(*(_named(cls, prefix) for cls in speech_classes))
    apply_upstream_version_check(config)
    apply_norms(config, norms, prefix=prefix)
    apply_mlps(config, mlps, prefix=prefix, description="glu_activation slot guard")
    apply_call_sites(config, call_sites, prefix=prefix)
    apply_rope(config, rope)
    if mrope is not None:
        config.apply_snippet("vlm_mrope_guard", mrope, description="multimodal RoPE behind the rope slot")
    if vision.rope is not None:
        config.apply_snippet(
            "vlm_rope_vision_guard", vision.rope, description="vision RoPE behind the rope_vision slot"
        )
    config.apply_snippet(
        "vlm_vision_dummy_forward",
        f"{_named(vision.cls, prefix)}.dummy_forward",
        add=True,
        patch_weight=vision.patch_weight,
        description="a zero loss term through the vision tower, for ranks without images",
    )
    config.apply_snippet(
        "omni_audio_dummy_forward",
        f"{_named(audio.cls, prefix)}.dummy_forward",
        add=True,
        input_weight=audio.input_weight,
        mel_bins=audio.mel_bins,
        frames=audio.frames,
        description="a zero loss term through the audio tower, for ranks without audio",
    )
    # The thinker model scatters the towers' features; the thinker is the head, as a VLM's two classes are.
    model_cls = _named(model, prefix)
    apply_sequence_parallel_forward(
        config,
        f"{model_cls}.forward",
        [
            ("self.audio_tower", "input_features"),
            ("self.visual", "pixel_values"),
            ("self.visual", "pixel_values_videos"),
        ],
    )
    if text_model is not None:
        apply_packed_documents(config, f"{_named(text_model, prefix)}.forward")
    thinker = apply_causal_lm(config, causal_lm, prefix=prefix, aux_loss=aux_loss, forward_kwargs=True)
    config.add_import("inspect", is_from_import=False)
    config.add_helper(
        omni_rope_index_without_model, description="upstream's get_rope_index without a model (picklable)"
    )
    for cls in (model_cls, thinker):
        config.apply_snippet(
            "omni_position_id_func",
            f"{cls}.get_position_id_func",
            add=True,
            helper=omni_rope_index_without_model.__name__,
            model=model_cls,
            attributes=list(rope_index_attributes),
            description="picklable multimodal position ids (audio included) for the data pipeline",
        )
        config.apply_snippet(
            "omni_metadata_collate_func",
            f"{cls}.get_metadata_collate_func",
            add=True,
            module=config.source_module,
            description="picklable collator step precomputing the vision and audio towers' metadata",
        )
    _apply_thinker_only(
        config, _named(top_level, prefix), thinker=thinker, speech=speech, refused=refused, prefix=prefix
    )
    apply_pretrained_model(config, pretrained_model, prefix=prefix)
    return config


def _apply_thinker_only(
    config: PatchConfig,
    top_level: str,
    *,
    thinker: str,
    speech: Sequence[str],
    refused: Mapping[str, str],
    prefix: str,
) -> None:
    """The top-level class builds and loads the thinker alone, and refuses what only audio output needs."""
    config.add_helper(drop_speech_weights, description="load_state_dict pre-hook: the speech side's keys dropped")
    config.apply_snippet(
        "omni_thinker_only_model",
        top_level,
        kind="replace_class",
        cls=top_level,
        bases=f"{prefix}PreTrainedModel, GenerationMixin",
        config_class=f"{prefix}Config",
        no_split=[f"{prefix}AudioEncoder", f"{prefix}VisionEncoder"],
        thinker=thinker,
        speech=list(speech),
        hook=drop_speech_weights.__name__,
        refused=dict(refused),
        speech_side=" and ".join(("the " if i == 0 else "") + name for i, name in enumerate(speech)),
        keep_decorators=False,
        description="the thinker alone; audio output refused; the speech side's checkpoint keys dropped on load",
    )
