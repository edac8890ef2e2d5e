"""The composed (LLaVA-style) contract: what a VLM's upstream code must look like for the composed_vlm recipe.

The recipe (generator/recipes/vlm_composed.py) patches a ``Model`` that builds its language model with
``AutoModel.from_config(config.text_config)`` (or as a class of its own module on ``config.text_config``, which the
recipe then guards as a text recipe would) and its vision tower the same way (or as a class of its own module
on ``config.vision_config``), projects the tower's features with a module next to it (or inside it), scatters them into the
placeholder tokens ``get_placeholder_mask`` finds (or a method of the ``Model`` that finds them by a config id
and scatters them itself, Idefics3's ``inputs_merger``), and gives the language model its own 1-D positions. The
generated ``__init__`` builds each ``AutoModel`` sub-model as the generated class registered for the sub-config's
model_type, and ``dummy_forward`` runs ``get_image_features`` on one blank image. A model that differs in any of
these gets the list of differences, one line each, which the scaffold's refusal prints (docs/scaffolding.md,
"The composed-VLM contract").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from modelgraft.generator.upstream.vlm_structure import VlmInfo

TEXT_CONFIG = "text_config"
VISION_CONFIG = "vision_config"
#: What ``dummy_forward`` hands ``get_image_features``: a blank image, and its size where the method takes one.
IMAGE_FEATURES_INPUT = "pixel_values"
SIZES_INPUT = "image_sizes"
#: Patch rows on a (frames, height, width) grid, as the Qwen-VL image processors write them: ``dummy_forward``
#: gives a blank grid of the smallest size the merger takes.
GRID_INPUT = "image_grid_thw"
#: One merge factor per image of the grid (VideoLLaMA3's), which goes with a blank grid as its side.
MERGE_SIZES_INPUT = "image_merge_sizes"


def composed_differences(info: VlmInfo) -> tuple[str, ...]:
    """What sets ``info`` apart from the composed contract, one line each; empty when it fits."""
    if info.model_class is None:
        return ("no class holds both a vision tower and a language model",)
    where = info.model_class
    composed = {c.attr: c for c in info.compositions if c.owner == where}
    out: list[str] = []
    language = info.language_model
    if language is None:
        out.append(f"{where} holds no language model")
    elif language.attr in composed:
        if composed[language.attr].config_attr != TEXT_CONFIG:
            out.append(
                f"{where} builds self.{language.attr} from config.{composed[language.attr].config_attr}, not config."
                f"{TEXT_CONFIG}"
            )
    elif language.cls is None or language.config_attr != TEXT_CONFIG:
        out.append(
            f"{where} builds self.{language.attr} as {language.built_by}: neither AutoModel.from_config(config."
            f"{TEXT_CONFIG}) nor a class of its module on config.{TEXT_CONFIG}"
        )
    vision = info.vision
    if vision is None:
        out.append(f"{where} holds no vision tower")
    elif vision.attr in composed:
        if composed[vision.attr].config_attr != VISION_CONFIG:
            out.append(
                f"{where} builds self.{vision.attr} from config.{composed[vision.attr].config_attr}, not config."
                f"{VISION_CONFIG}"
            )
    elif vision.cls is None or vision.config_attr != VISION_CONFIG:
        out.append(
            f"{where} builds self.{vision.attr} as {vision.built_by}: neither AutoModel.from_config(config."
            f"{VISION_CONFIG}) nor a class of its module on config.{VISION_CONFIG}"
        )
    for composition in composed.values():
        if composition.model_type is None:
            out.append(
                f"the configuration names no default model_type for {composition.config_attr}"
                f" (built as self.{composition.attr}): no generated class can be chosen for its tests"
            )
    for name in info.unset_sized_fields:
        out.append(
            f"{where}.__init__ takes len(config.{name}), which the default configuration leaves None: its value is"
            " the checkpoint's to choose, so no tiny config can be derived for the tests"
        )
    if info.nested_vision_configs:
        out.append(
            f"the vision config nests sub-configs ({', '.join(info.nested_vision_configs)}): one tower's sizes"
            " cannot shrink it for the tests"
        )
    if info.rope_index is not None:
        out.append(f"{info.rope_index.owner}.get_rope_index gives multimodal position ids, not the text's 1-D ones")
    mask = info.placeholder_mask
    merger = info.placeholder_merger
    if mask is None and merger is not None:
        # Idefics3's inputs_merger: the placeholder scatter in a method of its own, called by the forward.
        if not info.placeholder_ids:
            out.append(
                f"{merger.owner}.{merger.name} compares input_ids with no self.config.<image id>: a rank's slice"
                " cannot find its image placeholders"
            )
    elif mask is None:
        out.append(
            f"{where} has no get_placeholder_mask, and its forward calls no method that compares input_ids with a"
            " self.config.<image id> and masked_scatters the features: its image features are not scattered into"
            " placeholders"
        )
    elif mask.returns not in (1, 2):
        out.append(f"{mask.owner}.get_placeholder_mask returns a different number of masks on different paths")
    elif not info.forward_scatters:
        out.append(
            f"{where}.forward leaves get_placeholder_mask to another method: the sequence-parallel forward cannot"
            " hand it a rank's own features"
        )
    elif not info.placeholder_ids:
        out.append(
            f"{mask.owner}.get_placeholder_mask compares input_ids with no self.config.<image id>: a rank's slice"
            " cannot find its image placeholders"
        )
    if not info.mergers:
        out.append(
            f"{where} holds no projector, next to its vision tower or in it (multi_modal_projector, connector, ...)"
        )
    features = info.image_features
    if features is None:
        out.append(f"{where} has no get_image_features for dummy_forward to run on a blank image")
    else:
        # The blank image's size goes with it (Pixtral's variable sizes; LLaVA-NeXT's tiles of the tower's size).
        given = (IMAGE_FEATURES_INPUT, SIZES_INPUT, GRID_INPUT)
        if info.image_patch_grid:  # each image's (height, width) in patches: a blank grid the mergers take
            given += (info.image_patch_grid,)
        if GRID_INPUT in features.params:
            given += (MERGE_SIZES_INPUT,)
        needed = [p for p in features.required if p not in given]
        grids = [p for p in features.params if "grid" in p and p not in needed and p != GRID_INPUT]
        if grids:  # Qwen-VL-like patch rows (optional grid or not): a blank image of pixels is not its input
            out.append(
                f"{features.owner}.get_image_features takes {', '.join(grids)}: patch rows on a grid, not images"
                " a blank one can stand for"
            )
        if IMAGE_FEATURES_INPUT not in features.params or needed:
            what = f"requires {', '.join(needed)}" if needed else f"takes no {IMAGE_FEATURES_INPUT}"
            out.append(
                f"{features.owner}.get_image_features {what}: dummy_forward's blank image"
                f" ({IMAGE_FEATURES_INPUT} alone) cannot feed it"
            )
    return tuple(out)
