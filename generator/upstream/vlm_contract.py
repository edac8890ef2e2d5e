"""The Qwen-VL contract: what a VLM's upstream code must look like for the vlm recipe to patch it.

The recipe (generator/recipes/vlm.py) rewrites a ``Model`` that holds a vision tower (``self.visual``, or
under another name the recipe is told: HY-V4-VL's ``self.vision_tower``) and
``self.language_model`` (whose forward takes the ``[4, B, L]`` position ids of packed documents), calls
``get_rope_index`` with Qwen-VL's inputs, splits image and video placeholders with a pair of masks (or, in an
image-only model, finds its image placeholders with one: ``VlmInfo.image_only``) and merges patches in (or next
to) the tower. A model that follows all four fits; any other gets the list of
what differs, which the scaffold's refusal prints (docs/scaffolding.md, "The Qwen-VL contract"). A tower or
language model built with ``AutoModel.from_config`` on a sub-config whose default type is another package's
(glm46v's glm4v towers) is judged by that package's class, which the reader reads there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from modelgraft.generator.upstream.vlm_structure import VlmInfo

#: ``get_rope_index``'s named inputs in the pinned transformers' Qwen-VL models (``mm_token_type_ids`` required).
#: Further optional inputs fit (qwen2_5_vl's ``second_per_grid_ts``): the position-id function passes the
#: processor's outputs through by name.
ROPE_INDEX_PARAMS = ("input_ids", "mm_token_type_ids", "image_grid_thw", "video_grid_thw", "attention_mask")
ROPE_INDEX_REQUIRED = ("input_ids", "mm_token_type_ids")
LANGUAGE_ATTR = "language_model"


def contract_differences(info: VlmInfo) -> tuple[str, ...]:
    """What sets ``info`` apart from the Qwen-VL contract, one line each; empty when it fits."""
    if info.model_class is None:
        return ("no class holds both a vision tower and a language model",)
    out: list[str] = []
    where = info.model_class
    if info.vision is None:
        out.append(f"{where} holds no vision tower")
    if info.language_model is None or info.language_model.attr != LANGUAGE_ATTR:
        got = f"self.{info.language_model.attr}" if info.language_model else "nothing"
        out.append(f"{where} holds its language model as {got}, not self.{LANGUAGE_ATTR}")
    index = info.rope_index
    if index is None:
        out.append(f"{where} has no get_rope_index (no multimodal position ids)")
    else:
        missing = [p for p in ROPE_INDEX_PARAMS if p not in index.params]
        if missing or index.required != ROPE_INDEX_REQUIRED:
            out.append(
                f"{index.owner}.get_rope_index takes {index.params} (required {index.required}),"
                f" not {ROPE_INDEX_PARAMS} (required {ROPE_INDEX_REQUIRED})"
            )
    if not info.language_model_reads_text_row and info.language_model is not None:
        out.append(
            f"{info.language_model.cls}.forward takes no [4, B, L] position ids (no position_ids.shape[0] == 4"
            " test): packed documents have no text row to keep them apart"
        )
    mask = info.placeholder_mask
    if mask is None:
        out.append(f"{where} has no get_placeholder_mask")
    elif info.image_only and not info.placeholder_ids:
        out.append(
            f"{mask.owner}.get_placeholder_mask compares input_ids with no self.config.<id>: the image-only"
            " sequence-parallel forward finds each rank's image placeholders by that id"
        )
    elif mask.returns != 2 and not info.image_only:
        out.append(
            f"{mask.owner}.get_placeholder_mask returns {mask.returns} mask(s), not a pair (image, video), and the"
            " model takes videos (a video processor, or pixel_values_videos in its forward)"
            if mask.returns == 1
            else f"{mask.owner}.get_placeholder_mask returns {mask.returns} mask(s), not a pair (image, video)"
            if mask.returns >= 0
            else f"{mask.owner}.get_placeholder_mask returns a different number of masks on different paths"
        )
    if any(m.place == "model" for m in info.mergers) or any(
        m.place == "tower" and not m.deepstack for m in info.mergers
    ):
        pass
    elif info.vision is not None and info.vision.cls is None:
        out.append(
            f"self.{info.vision.attr} is built from a sub-config the checkpoint chooses (AutoConfig):"
            " no tower class to find its merger in"
        )
    else:
        out.append("no merger in the vision tower nor next to it in the Model")
    return tuple(out)
