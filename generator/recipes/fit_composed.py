"""The fit of a composed (LLaVA-style) VLM: the composed_vlm recipe's arguments, or why none can be made.

A VLM whose upstream structure shows the composed contract (docs/scaffolding.md, "The composed-VLM contract")
is scaffolded with :func:`modelgraft.generator.recipes.vlm_composed.composed_vlm`: its towers are built by
``build_sub_model`` as the generated classes registered for their sub-configs' model types, so the fit checks
that each type a default config builds has one:

- a type some package of this project registers (``register_model("llama", ...)`` in ``models/*/__init__.py``:
  a zoo decoder, a vision encoder of the library), read from the source, nothing imported;
- a type the model's own package defines (``internvl_vision``, ``mistral_large4_text``): the scaffold registers it
  too, for the same generated module, which holds its classes. An own text model, built by ``AutoModel`` or as a
  class of the module, gets the text recipe's guards (RoPE, experts, router) from the composed recipe.

Anything else is refused, naming the type and the way to add it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from modelgraft.generator.recipes.fit_vlm import VlmFinding
from modelgraft.generator.recipes.registered import registered_model_types, registered_types_in
from modelgraft.generator.upstream.composed_contract import TEXT_CONFIG, VISION_CONFIG
from modelgraft.generator.upstream.structure import ModelStructure

__all__ = ["composed_arguments", "own_text", "registered_model_types", "text_layers"]

ADD_DECODER = "scaffold a package for it first (copier copy, docs/adding-a-model.md)"
ADD_ENCODER = 'add it to the library of vision encoders (docs/vision-encoders.md, "Adding an encoder")'


def composed_arguments(
    structure: ModelStructure, refusals: list[VlmFinding], models_roots: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """The composed recipe's own arguments (``composed``); each difference and unbuildable type appended.
    ``models_roots``: a training repository's folders of model packages, whose registrations count too."""
    vlm = structure.vlm
    assert vlm is not None
    model = vlm.model_class or structure.model
    line = vlm.model_line
    for difference in vlm.composed_differences:
        refusals.append(VlmFinding(model, line, f"differs from the composed-VLM contract: {difference}"))
    if vlm.composed_differences:
        return {}
    registered = registered_types_in(models_roots)
    sub_models: dict[str, str] = {}
    own: dict[str, str] = {}
    for composition in vlm.compositions:
        if composition.owner != vlm.model_class or composition.model_type is None:
            continue
        model_type = composition.model_type
        sub_models[composition.config_attr] = model_type
        if composition.own and composition.config_attr in (VISION_CONFIG, TEXT_CONFIG) and composition.config_class:
            own[model_type] = composition.config_class
            continue
        if composition.own:
            reason = (
                f"{composition.config_attr}'s model_type {model_type} is this package's own, but the configuration"
                " module names no config class for it: the scaffold cannot register the generated class"
            )
            refusals.append(VlmFinding(model, line, reason))
        elif model_type not in registered:
            how = ADD_DECODER if composition.config_attr == TEXT_CONFIG else ADD_ENCODER
            reason = (
                f"{composition.config_attr}'s default model_type {model_type} has no generated class in this project"
                f" (self.{composition.attr} would be upstream's, unguarded): {how}"
            )
            refusals.append(VlmFinding(model, line, reason))
    head = structure.causal_lm
    if head is not None and not head.cls.endswith("ForConditionalGeneration"):
        reason = f"the causal LM {head.cls} is not the conditional-generation head over {model}"
        refusals.append(VlmFinding(head.cls, head.line, reason))
    assert vlm.vision is not None and vlm.language_model is not None  # the contract holds
    return {
        "composed": {
            "model": model,
            "tower": vlm.vision.attr,
            "language_model": vlm.language_model.attr,
            "sub_models": sub_models,
            "own_types": own,
            "image_tiles": vlm.image_tiling and vlm.image_sizes,
            "image_sizes": vlm.image_sizes and not vlm.image_tiling,
            "image_rows": vlm.image_rows,
            "zero_images_are_padding": vlm.zero_images_are_padding,
            "image_grid": vlm.image_grid,
            "image_merge_sizes": vlm.image_merge_sizes,
            "image_patch_grid": vlm.image_patch_grid or "",
            "patch_grid_factors": [list(f) for f in vlm.patch_grid_factors],
            "placeholder_ids": list(vlm.placeholder_ids),
            # A tower's own base class (InternViT's): the base-class changes, as the model's base gets them
            "pretrained_models": [c for c in vlm.pretrained_bases if c != f"{structure.prefix}PreTrainedModel"],
            "own_text": own_text(structure),
            # Tokens that attend both ways (PaliGemma's prefix, Gemma3's image tokens): no sequence-parallel
            # branch, and image batches are refused under sequence parallelism and in packed rows instead.
            "sequence_parallel": not vlm.bidirectional_mask,
        }
    }


def own_text(structure: ModelStructure) -> bool:
    """Whether the language model is this module's own class (built directly, or by ``AutoModel`` for a text
    type the package defines): then nothing else guards its RoPE and experts, and the composed recipe does."""
    vlm = structure.vlm
    assert vlm is not None and vlm.language_model is not None
    for composition in vlm.compositions:
        if composition.owner == vlm.model_class and composition.attr == vlm.language_model.attr:
            return composition.own
    return True  # not composed: the contract holds, so it is a class of this module on the text config


def text_layers(structure: ModelStructure) -> str:
    """The ``state_dict`` prefix of an own text model's decoder layers, seen from the conditional-generation
    head, for the expert-parallel plan: ``model.language_model.layers`` where the head holds the Model as
    ``self.model`` and the Model holds a base text model."""
    vlm = structure.vlm
    assert vlm is not None and vlm.language_model is not None
    path = [vlm.language_model.attr]
    head = structure.causal_lm
    if head is None or head.cls != vlm.model_class:
        path.insert(0, "model")
    if (vlm.language_model.cls or "").endswith("ForCausalLM"):
        path.append("model")
    return ".".join([*path, "layers"])
