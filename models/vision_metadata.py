"""The vision tower's packing metadata of a Qwen-VL batch, computed once by a collator step instead of in each forward.

transformers 5.16 computes, in every forward of a Qwen-VL vision tower, the packed attention boundaries of its
patches (``cu_seqlens``: one segment per frame), their longest segment (``max_seqlen``, which flash attention
reads) and the (row, column) rotary position of each patch (``position_ids``), from the batch's ``grid_thw``
(``transformers.vision_utils``). They are data-dependent (``.tolist()``, ``repeat_interleave``, a Python loop
over the images): a forward that computes them syncs the device and breaks graph capture. The models accept them
precomputed instead, as ``image_cu_seqlens``, ``image_max_seqlen``, ``image_position_ids`` and the same three for
``video_`` (``get_image_features`` / ``get_video_features`` strip the modality prefix and the vision tower pops
them), so a data-loader worker computes them on the CPU with upstream's own functions.

:func:`vision_metadata` is that step, module-level so a ``functools.partial`` of it pickles into data-loader
workers; the models' ``get_metadata_collate_func()`` returns it bound to their ``spatial_merge_size``
(docs/snippets.md, "VLMs: the `vlm` recipe").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers.vision_utils import get_vision_cu_seqlens, get_vision_position_ids

__all__ = ["GRIDS", "METADATA_KEYS", "vision_metadata"]

#: The batch key holding each modality's grids (``[n, 3]``: frames, patch rows, patch columns per item).
GRIDS = {"image": "image_grid_thw", "video": "video_grid_thw"}

#: What the step adds per modality present, under ``<modality>_<name>``.
METADATA_KEYS = ("cu_seqlens", "max_seqlen", "position_ids")


def vision_metadata(spatial_merge_size: int, batch: Mapping[str, Any]) -> dict[str, Any]:
    """``batch`` plus the vision metadata of each modality it has grids of, computed as the vision tower would.

    ``cu_seqlens`` (int32, one segment of ``h * w`` patches per frame) and ``position_ids`` (``[patches, 2]``, in
    the spatial-merge block order the tower reads its patches in) are upstream's ``get_vision_cu_seqlens`` and
    ``get_vision_position_ids``; ``max_seqlen`` is the longest segment as an int, what ``get_max_seqlen`` gives
    flash attention (other attention implementations split by ``cu_seqlens`` and ignore it). A modality without
    grids (no images, or no videos, in the batch) gets no keys; the batch's own entries are left as they are.
    """
    out = dict(batch)
    for modality, grids_key in GRIDS.items():
        grids = batch.get(grids_key)
        if grids is None or len(grids) == 0:
            continue
        cu_seqlens = get_vision_cu_seqlens(grids)
        out[f"{modality}_cu_seqlens"] = cu_seqlens
        out[f"{modality}_max_seqlen"] = int(torch.diff(cu_seqlens).max())
        out[f"{modality}_position_ids"] = get_vision_position_ids(grids, spatial_merge_size)
    return out
