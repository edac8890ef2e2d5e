"""The fit of a composed audio language model (category ``omni``): the composed_audio recipe's arguments.

An Omni model that is not Qwen-Omni-like but composed as a LLaVA-style VLM is, with an audio tower
(docs/scaffolding.md, "Audio language models"), is scaffolded with
:func:`modelgraft.generator.recipes.audio_lm.composed_audio`: its towers are built by ``build_sub_model`` as the
generated classes registered for their sub-configs' model types, so the fit checks that each type a default config
builds has one: the audio encoder's type the package defines (the scaffold registers the generated module for it),
and the language model's type some package of this project, or of the training repository the copy goes to,
registers. The module's own norms, MLPs, call sites and RoPE function (the audio encoder's, the projector's) are
guarded as the text fit reads them. Anything else is refused, naming the difference or the type to add.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from modelgraft.generator.recipes.registered import registered_types_in
from modelgraft.generator.upstream.structure import ModelStructure

__all__ = ["audio_lm_arguments", "audio_lm_processors"]

ADD_DECODER = "scaffold a package for it first (copier copy, docs/adding-a-model.md)"


def audio_lm_arguments(
    structure: ModelStructure, refusals: list[tuple[str, str]], models_roots: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """The composed_audio recipe's own arguments (``audio_lm``); each difference and unbuildable type appended to
    ``refusals`` as (where, reason). ``models_roots``: a training repository's folders of model packages."""
    info = structure.audio_lm
    assert info is not None
    where = info.model_class or structure.model
    if info.differences:
        refusals += [(where, f"differs from the composed audio contract: {d}") for d in info.differences]
        return {}
    assert info.model_class is not None
    own = dict(info.own_types)
    registered = registered_types_in(models_roots)
    attrs = {"audio_config": info.tower, "text_config": info.language_model}
    for config_attr, model_type in info.sub_models:
        if model_type not in own and model_type not in registered:
            reason = (
                f"{config_attr}'s default model_type {model_type} has no generated class in this project"
                f" (self.{attrs.get(config_attr, config_attr)} would be upstream's, unguarded): {ADD_DECODER}"
            )
            refusals.append((where, reason))
    head = structure.causal_lm
    if head is None or head.cls != info.head:
        refusals.append((where, f"the causal LM is not the conditional-generation head over {info.model_class}"))
    return {
        "audio_lm": {
            "model": info.model_class,
            "tower": info.tower,
            "language_model": info.language_model,
            "sub_models": dict(info.sub_models),
            "own_types": own,
            "features_mask": info.features_mask,
            "features_unread": list(info.features_unread),
            "features_attribute": info.features_attribute,
            "placeholder_id": info.placeholder_ids[0],
        }
    }


def audio_lm_processors(structure: ModelStructure, refusals: list[tuple[str, str]]) -> dict[str, str]:
    """The processor class the scaffold's tests build audio batches with: the package's, else the Auto tables'."""
    info = structure.audio_lm
    assert info is not None
    processor = next((p.cls for p in info.processors if p.kind == "processor"), None)
    if processor is None:
        refusals.append(
            (
                info.model_class or structure.model,
                "no processor class: neither the package nor the Auto tables name one",
            )
        )
        return {}
    return {"processor": processor}
