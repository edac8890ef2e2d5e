"""The composed audio language model recipe: an audio tower, a projector and a language model built from the text
config, audio features scattered into placeholder tokens, 1-D positions.

Upstream's ``<Prefix>Model`` of these models (glmasr, audioflamingo3, qwen3_asr) builds its audio tower and its
language model with ``AutoModel.from_config`` on the sub-configs, as a composed VLM builds its vision tower, so the
checkpoint's config picks the classes (docs/scaffolding.md, "Audio language models"). What the pinned transformers
has upstream is kept: the audio features' lengths and mask, the projector, the placeholder mask and scatter, the
output dataclasses. The recipe adds:

- ``vlm_composed_towers_init`` on ``<Prefix>Model.__init__``: every ``AutoModel.from_config(...)`` becomes
  :func:`modelgraft.models.composition.build_sub_model`, which builds the generated class registered for the
  sub-config's ``model_type``: the audio encoder this same generated module defines (the scaffold registers it),
  and a zoo decoder for the text config; an unregistered type is refused by name;
- the dense pieces for what the module itself defines (the audio encoder's layer norms and activations, the
  projector's activation, an audio encoder's own RoPE function): ``call_sites_guard``, ``glu_mlp_guard`` /
  ``mlp_activation_guard``, ``rms_norm_guard``, ``rope_guard``;
- ``audio_composed_dummy_forward``: an added ``<Prefix>Model.dummy_forward`` running the tower and the projector
  on one blank clip (a zero loss term for ranks without audio);
- ``vlm_sequence_parallel_forward`` on ``<Prefix>Model.forward``: under the ``placeholder_features`` slot, the
  audio features of this rank's placeholders are scattered into its slice of the sequence by upstream's own
  statements, and a rank whose batch has no audio adds ``dummy_forward``; a call packing documents turns the cache
  off first, so the language model's mask keeps the documents apart;
- ``causal_lm_loss_guard`` on ``<Prefix>ForConditionalGeneration.forward``, with the forward's ``**kwargs`` handed
  to the kernel;
- the base class's checkpoint conversions, strict loading and attention on request
  (:func:`modelgraft.generator.recipes.dense.apply_pretrained_model`).
"""

from __future__ import annotations

from collections.abc import Sequence

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
from modelgraft.generator.recipes.vlm import apply_sequence_parallel_forward

__all__ = ["composed_audio"]


def composed_audio(
    config: PatchConfig,
    *,
    prefix: str,
    tower: str = "audio_tower",
    language_model: str = "language_model",
    features_mask: str = "input_features_mask",
    features_unread: Sequence[str] = (),
    features_attribute: str = "pooler_output",
    placeholder_id: str = "self.config.audio_token_id",
    norms: Sequence[Norm] = (),
    mlps: Sequence[Mlp] = (),
    call_sites: Sequence[CallSites] = (),
    rope: str | Rope | None = None,
    causal_lm: LossHead = LossHead("{prefix}ForConditionalGeneration"),
    model: str = "{prefix}Model",
    pretrained_model: str | None = "{prefix}PreTrainedModel",
) -> PatchConfig:
    """Apply the composed audio snippets to ``config`` for the model whose classes start with ``prefix``.

    ``tower`` and ``language_model`` are the attributes of ``model`` holding the audio tower and the text model;
    ``features_mask`` is ``get_audio_features``' mask of real mel frames ("" where it takes none),
    ``features_unread`` its required parameters its body never reads (None in ``dummy_forward``), and
    ``features_attribute`` the field of its output the forward scatters; ``placeholder_id`` the config id the
    audio placeholders are found by. ``norms``, ``mlps``, ``call_sites`` and ``rope`` are the module's own (the
    audio encoder's and the projector's): the language model's are its package's.
    """
    apply_upstream_version_check(config)
    apply_norms(config, norms, prefix=prefix)
    apply_mlps(config, mlps, prefix=prefix, description="glu_activation slot guard")
    apply_call_sites(config, call_sites, prefix=prefix)
    apply_rope(config, rope)
    model_cls = _named(model, prefix)
    config.apply_snippet(
        "vlm_composed_towers_init",
        f"{model_cls}.__init__",
        description="the towers are generated classes, chosen by the sub-configs' model_type",
    )
    config.apply_snippet(
        "audio_composed_dummy_forward",
        f"{model_cls}.dummy_forward",
        add=True,
        tower=tower,
        mask=features_mask,
        unread=list(features_unread),
        attribute=features_attribute,
        description="a zero loss term through the audio tower and the projector, for ranks without audio",
    )
    apply_sequence_parallel_forward(
        config,
        f"{model_cls}.forward",
        [("self", "input_features")],
        packed_text=True,
        language_model=language_model,
        audio_id=placeholder_id,
        audio_attribute=features_attribute,
    )
    apply_causal_lm(config, causal_lm, prefix=prefix, forward_kwargs=True)
    apply_pretrained_model(config, pretrained_model, prefix=prefix)
    return config
