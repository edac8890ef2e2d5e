"""The fit of a vision-language model (categories ``vlm`` and ``vlm_moe``): the vlm / vlm_moe recipe's arguments.

A VLM that follows the Qwen-VL contract (docs/scaffolding.md, "The Qwen-VL contract") is scaffolded as the
zoo's Qwen-VL models are configured: its text decoder gets the dense (or MoE) fit's guards, read by the same
rules (:func:`modelgraft.generator.recipes.fit.text_arguments`), and the vision side what the reader found
upstream (docs/scaffolding.md, "VLM scaffolds"):

- ``vision``: the tower class that gets ``dummy_forward``, the expressions of its patch embedding's weight and
  of its merge size, and its rotary function (the ``rope_vision`` slot), when its attention calls one; where
  they are not Qwen-VL's, how the patch embedding takes its patches (``patch_input``: PaddleOCR-VL's small
  images) and the constant merge size its rotary positions are laid out by (``position_merge``);
- ``videos`` and ``placeholder_ids``, for an image-only model (one placeholder mask, no video input:
  PaddleOCR-VL): no video tower call, and the image placeholders found by the config's image id;
- ``mrope``: the text attention's sectioned multimodal RoPE, a function taking ``mrope_section`` (Qwen2-VL's
  ``apply_multimodal_rotary_pos_emb`` before its rotary embedding sectioned the positions itself), behind the
  ``rope`` slot; a plain rotate-half text RoPE (the whole Qwen-VL family's in the pinned transformers) goes
  behind it through ``rope`` as for a dense model;
- ``towers``: each ``AutoModel.from_config(config.<sub>)`` of the ``Model``, rewritten to this module's class;
  where the sub-config's default type is another package's (glm46v's ``glm4v_vision``), ``sub_models`` instead:
  the recipe builds it with ``build_sub_model`` as the generated class registered for that type, which a
  package of this project must register (else a refusal naming the package to scaffold), and
  ``sub_model_slots`` the slots that generated module consults, which the tests bind;
- ``model``: the class holding both towers, whose ``get_rope_index`` the position-id function runs.

The processor the tests build (the package's processor and its PIL image processor, else its torchvision one on
modelgraft's torch stand-in for torchvision's image functions) is part of the fit too: a VLM without a processor
or an image processor is refused, as is one that does not follow the contract, each with its reason, before
anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelgraft.generator.recipes.registered import registered_types_in, sub_model_slots_in
from modelgraft.generator.upstream.structure import ModelStructure
from modelgraft.generator.upstream.vlm_structure import ProcessorInfo, VlmInfo

__all__ = ["VlmFinding", "image_processor_answers", "multimodal_rope_name", "vlm_arguments", "vlm_processors"]

#: The reader's note on a VLM's plain text RoPE: the tower's function is guarded apart (rope_vision).
_VISION_ROPE_NOTE = "the module also defines apply_rotary_pos_emb_vision"


@dataclass(frozen=True)
class VlmFinding:
    """Why a VLM cannot be scaffolded (a refusal of the fit), where upstream."""

    where: str
    line: int
    reason: str


def multimodal_rope_name(structure: ModelStructure) -> str:
    """The text attention's sectioned multimodal RoPE function (it takes ``mrope_section``), else ""."""
    rope = structure.rope
    if rope is not None and rope.kind == "function" and "mrope_section" in rope.params and rope.name:
        return rope.name
    return ""


def text_rope_is_plain(structure: ModelStructure) -> bool:
    """The reader's only objection to the text RoPE is the tower's function next to it, which a VLM guards apart."""
    rope = structure.rope
    return rope is not None and bool(rope.reason) and _VISION_ROPE_NOTE in rope.reason


def vlm_arguments(
    structure: ModelStructure, refusals: list[VlmFinding], models_roots: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """The vision-side recipe arguments (``vision``, ``mrope``, ``towers``, ``model``); refusals appended.
    ``models_roots``: a training repository's folders of model packages, whose registrations count too."""
    vlm = structure.vlm
    assert vlm is not None
    model = vlm.model_class or structure.model
    line = vlm.model_line
    for difference in vlm.contract_differences:
        refusals.append(VlmFinding(model, line, f"differs from the Qwen-VL contract: {difference}"))
    if vlm.contract_differences:
        return {}
    tower = vlm.vision
    assert tower is not None and tower.cls is not None  # the contract holds
    sub_models, slots = _sub_models(vlm, refusals, models_roots)
    if not tower.patch_weight:
        reason = "no patch embedding (a Conv3d, Conv2d or Linear under patch_embed) that dummy_forward can size"
        refusals.append(VlmFinding(tower.cls, tower.line, reason))
    head = structure.causal_lm
    if head is not None and not _holds_model(structure, head.cls):
        reason = f"the causal LM {head.cls} is not the conditional-generation head over {model}"
        refusals.append(VlmFinding(head.cls, head.line, reason))
    rope = vlm.vision_rope
    vision = {
        "cls": tower.cls,
        "patch_weight": tower.patch_weight or "",
        "rope": rope.name if rope is not None and rope.name else "",
        # A tower that keeps no merge size of its own (hunyuan_vl's leaves it to its merger): its config's.
        "merge_size": "self.spatial_merge_size" if tower.spatial_merge_size else "self.config.spatial_merge_size",
        "attr": tower.attr,
    }
    if tower.patch_input != "rows":  # written only where it is not the Qwen-VL towers' flat rows
        vision["patch_input"] = tower.patch_input
    if tower.position_merge is not None:
        vision["position_merge"] = tower.position_merge
    if any(merger.place == "model" for merger in vlm.mergers):  # written only where the Model holds it
        vision["merger_outside"] = True
    arguments: dict[str, Any] = {
        "vision": vision,
        "mrope": multimodal_rope_name(structure),
        "towers": {
            c.config_attr: c.builds for c in vlm.compositions if c.owner == vlm.model_class and c.builds is not None
        },
        "model": model,
    }
    language = vlm.language_model
    if (
        language is not None
        and language.cls
        and not language.package
        and language.cls != f"{structure.prefix}TextModel"
    ):
        # The text model whose forward gets the packed-documents guard, where not named after the prefix
        # (PaddleOCR-VL's PaddleOCRTextModel beside its PaddleOCRVLModel).
        arguments["text_model"] = language.cls
    if vlm.image_only:
        # One placeholder mask, found by the image id: the forward feeds the tower from pixel_values alone.
        arguments["videos"] = False
        arguments["placeholder_ids"] = list(vlm.placeholder_ids)
    if sub_models:
        # Built by build_sub_model as another package's generated classes, which guard them and give the tower
        # its dummy_forward; the test suite binds the slots those classes consult.
        arguments["sub_models"] = sub_models
        arguments["sub_model_slots"] = list(slots)
        if tower.package:
            vision["package"] = tower.package
        if vlm.language_model is not None and vlm.language_model.package:
            arguments["text_model"] = None
    return arguments


def _sub_models(
    vlm: VlmInfo, refusals: list[VlmFinding], models_roots: tuple[Path, ...]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """The ``Model``'s ``AutoModel`` sub-models of another package's type (config attribute -> default
    model_type), and the slots their generated classes consult; each type no package of this project registers
    is refused by name, with the package to scaffold."""
    where, line = vlm.model_class or "-", vlm.model_line
    registered = registered_types_in(models_roots)
    towers = {t.config_attr: t for t in (vlm.vision, vlm.language_model) if t is not None and t.config_attr}
    sub_models: dict[str, str] = {}
    slots: list[str] = []
    for composition in vlm.compositions:
        tower = towers.get(composition.config_attr)
        if composition.owner != vlm.model_class or composition.model_type is None or tower is None:
            continue
        if not tower.package:
            continue
        sub_models[composition.config_attr] = composition.model_type
        if composition.model_type not in registered:
            reason = (
                f"{composition.config_attr}'s default model_type {composition.model_type} has no generated class in"
                f" this project (self.{composition.attr} would be upstream's {tower.cls}, unguarded): scaffold its"
                f" package first (copier copy -d model={tower.package}), which registers it"
            )
            refusals.append(VlmFinding(where, line, reason))
            continue
        found = sub_model_slots_in(composition.model_type, tower.cls, models_roots) if tower.cls else None
        if found is None:
            reason = (
                f"{composition.config_attr}'s default model_type {composition.model_type} is registered, but not as"
                ' register_model("<type>", modeling={"gpu": "<module>"}) naming a generated file of this project'
                f" that defines {tower.cls}: the slots that class consults cannot be read for the tests"
            )
            refusals.append(VlmFinding(where, line, reason))
            continue
        slots += [slot for slot in found if slot not in slots]
    return sub_models, tuple(slots)


def _holds_model(structure: ModelStructure, head: str) -> bool:
    """The head is a ``*ForConditionalGeneration`` (cohere_compass's causal LM is a text-only ``*ForCausalLM``)."""
    return head.endswith("ForConditionalGeneration")


def vlm_processors(vlm: VlmInfo, refusals: list[VlmFinding]) -> dict[str, str]:
    """The processor class and the image processor class the scaffold's tests build (both exported by
    ``transformers`` itself): the PIL image processor where upstream has one, else the torchvision one, which the
    tests build on modelgraft's torch stand-in for torchvision's image functions; then the answer
    ``image_processor_backend`` is ``"torchvision"`` (``modelgraft.models.image_processor_imports``).

    Videos go through the image processor (``modelgraft.models.testing.vlm_processor``), as upstream's video
    processors need torchvision; a package without a processor or any image processor is refused.
    """
    where = vlm.model_class or "-"
    processor = _first(vlm.processors, "processor")
    pil = _first(vlm.processors, "image_processor_pil")
    image = pil or _first(vlm.processors, "image_processor")
    if processor is None:
        reason = "no processor class: neither the package nor the Auto tables name one"
        refusals.append(VlmFinding(where, vlm.model_line, reason))
    if image is None:
        reason = "no image processor class: neither the package nor the Auto tables name one"
        refusals.append(VlmFinding(where, vlm.model_line, reason))
    if processor is None or image is None:
        return {}
    return image_processor_answers(processor.cls, image.cls, torchvision_only=pil is None)


def image_processor_answers(processor: str, image_processor: str, *, torchvision_only: bool) -> dict[str, str]:
    """The fit's processor answers; ``image_processor_backend`` only for a torchvision-only image processor, so
    that the answers of every model with a PIL one stay what they were."""
    answers = {"processor": processor, "image_processor": image_processor}
    if torchvision_only:
        answers["image_processor_backend"] = "torchvision"
    return answers


def _first(processors: tuple[ProcessorInfo, ...], kind: str) -> ProcessorInfo | None:
    return next((p for p in processors if p.kind == kind), None)
