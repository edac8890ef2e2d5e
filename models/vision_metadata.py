"""The vision tower's packing metadata of a Qwen-VL batch, computed once by a collator step instead of in each forward.

The pinned transformers computes, in every forward of a Qwen-VL vision tower, the packed attention boundaries of its
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

An Omni thinker's audio tower does the same per forward from ``feature_attention_mask``: it cuts the clips'
features into chunks of ``2 * n_window`` frames and pads them (``chunk_and_pad_features``: a ``.tolist()``),
finds the frames that survive its convolutions (``get_valid_indices``: an ``.item()``), Qwen2.5-Omni also the pairs
its average pool takes (``get_pool_indices``), and the attention windows (``get_audio_cu_seqlens``, with
``max_seqlen``). the pinned transformers' audio towers pop each of them from their kwargs when given, under these
unprefixed names, but the thinker's ``get_audio_features`` has no ``accepts_precomputed_kwargs`` (no ``audio_``
prefix is stripped), and the thinker's forward hands the same kwargs to ``get_image_features`` /
``get_video_features``, whose vision tower pops an unprefixed ``cu_seqlens`` / ``max_seqlen`` as its own, and to
the text decoder. So what a batch may carry precomputed is what no other tower reads
(:data:`AUDIO_METADATA_KEYS`); the audio ``cu_seqlens`` and ``max_seqlen`` cannot go through the thinker and
stay computed in the forward. :func:`omni_metadata` adds both, computed with upstream's own functions.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

import torch
from transformers.vision_utils import get_vision_cu_seqlens, get_vision_position_ids

__all__ = ["AUDIO_METADATA_KEYS", "GRIDS", "METADATA_KEYS", "audio_metadata", "omni_metadata", "vision_metadata"]

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


#: What each Omni audio tower of the pinned transformers takes precomputed through its thinker's forward, by upstream
#: modeling module: the unprefixed names it pops that no vision tower or text decoder reads (see the module
#: docstring for why its ``cu_seqlens`` and ``max_seqlen`` are not among them).
AUDIO_METADATA_KEYS: Mapping[str, tuple[str, ...]] = {
    "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni": (
        "padded_feature",
        "chunk_lengths",
        "valid_indices",
        "pool_indices",
    ),
    "transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe": ("padded_feature", "chunk_lengths", "valid_indices"),
}


def audio_metadata(module: str, n_window: int, batch: Mapping[str, Any]) -> dict[str, Any]:
    """``batch`` plus what the audio tower of upstream ``module`` computes per forward from the batch's clips.

    The clips are taken as the thinker's ``get_audio_features`` takes them (the frames ``feature_attention_mask``
    keeps, their lengths its row sums) and the metadata is computed by ``module``'s own ``chunk_and_pad_features``,
    ``get_valid_indices`` and (Qwen2.5-Omni) ``get_pool_indices`` at the tower's ``n_window``, under the names the
    tower pops (:data:`AUDIO_METADATA_KEYS`). A batch without ``input_features`` and ``feature_attention_mask``
    gets nothing; upstream's thinker needs the mask to run its audio tower at all.
    """
    features, mask = batch.get("input_features"), batch.get("feature_attention_mask")
    if features is None or mask is None:
        return dict(batch)
    upstream = importlib.import_module(module)
    keys = AUDIO_METADATA_KEYS[module]
    feature_lens = mask.sum(-1)
    kept = features.permute(0, 2, 1)[mask.bool()].permute(1, 0)
    padded_feature, chunk_lengths = upstream.chunk_and_pad_features(kept, feature_lens, n_window)
    valid = upstream.get_valid_indices
    # Qwen3-Omni's convolutions depend on the chunk size; Qwen2.5-Omni's single stride-2 one does not.
    window = {"n_window": n_window} if "n_window" in inspect.signature(valid).parameters else {}
    values = {
        "padded_feature": padded_feature,
        "chunk_lengths": chunk_lengths,
        "valid_indices": valid(chunk_lengths, **window),
    }
    if "pool_indices" in keys:
        values["pool_indices"] = upstream.get_pool_indices(feature_lens)
    return {**batch, **{key: values[key] for key in keys}}


def omni_metadata(spatial_merge_size: int, module: str, n_window: int, batch: Mapping[str, Any]) -> dict[str, Any]:
    """``batch`` plus the vision metadata (:func:`vision_metadata`) and the audio metadata (:func:`audio_metadata`)."""
    return audio_metadata(module, n_window, vision_metadata(spatial_merge_size, batch))
