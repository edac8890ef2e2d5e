"""Sequence parallelism for VLM and Omni models: the rank's placeholder features, and its slice of a batch.

A Qwen-VL (or Omni thinker) forward embeds the text, runs its towers (vision, audio) on the batch's images,
videos and audio clips, and scatters their features into the placeholder positions of the text. Under Ulysses
sequence parallelism each sp rank holds a contiguous slice of every row (:func:`shard_multimodal`), while the
towers' inputs (``pixel_values``, ``pixel_values_videos``, ``input_features`` and their grids) stay whole on every
sp rank. Every sp rank therefore runs each tower on the same whole images, which also keeps FSDP's collectives
of the towers in step; the generated forward then hands the tower's features to the ``placeholder_features``
slot, whose kernel here (family ``sp_placeholders``, bound by ``modelgraft.models.distributed.parallel_ops``
whenever the world has more than one rank) keeps the features of the placeholders in this rank's slice:

1. all-gather of the rank's placeholder mask ``[B, s]`` over the sp group: the whole sequence's mask ``[B, S]``;
2. the ordinal of every placeholder in the whole batch's flattened order (the order of the tower's features);
3. the features at the ordinals of this rank's placeholders, in this rank's order.

The gradient of a tower's parameters on one rank is then the share of its slice's tokens, and their sum over the
sp ranks (``average_gradients``, FSDP) the one-process gradient. A rank whose slice holds no placeholder gets an
empty selection (zero gradients, not None). A rank whose batch holds no image, video or audio at all runs the
tower's ``dummy_forward`` instead (the generated forward does, when this slot is bound), so data-parallel ranks
stay in step too.

Position ids cannot be computed from a slice: the multimodal RoPE (``get_rope_index``) numbers an image's
placeholders by its grid and the text after it by the image's extent. :func:`shard_multimodal` therefore takes
the position ids of the whole sequence, computed first (``model.get_position_id_func()``, in the data pipeline),
and slices them along their last dimension whatever the leading ones: ``[B, L]`` (text only), ``[3, B, L]``
(upstream's layout) or the packed ``[4, B, L]`` layout whose row 0 holds the text positions that transformers
reads packed documents from; :func:`packed_position_ids` builds that layout from each document's own position ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed import ProcessGroup

from modelgraft.models.distributed.mesh import ParallelConfigError, ParallelState
from modelgraft.models.distributed.sequence import IGNORE_INDEX, padded_length, sequence_slice, shard_sequence

__all__ = [
    "TOWER_INPUTS",
    "packed_position_ids",
    "packed_text_position_ids",
    "placeholder_features",
    "shard_multimodal",
]

#: Batch entries that mean a tower runs: their placeholders' positions need the whole sequence's position ids.
TOWER_INPUTS = ("pixel_values", "pixel_values_videos", "input_features")


def placeholder_features(
    mask: torch.Tensor, features: torch.Tensor, *, group: ProcessGroup | None = None
) -> torch.Tensor:
    """``placeholder_features`` slot contract for an sp rank: ``mask`` ``[B, s]`` (or ``[B, s, 1]``) marks the
    placeholders of this rank's slice, ``features`` ``[N, ...]`` are the tower's outputs for every placeholder of
    the whole batch (the same on every sp rank); returns the rows of this rank's placeholders. Collective."""
    if group is None:
        raise ParallelConfigError(
            "kernel 'sp_placeholders' of slot 'placeholder_features' needs the sp process group: bind it with "
            "modelgraft.models.distributed.parallel_ops(state)"
        )
    local = mask[..., 0] if mask.dim() == 3 else mask
    mine = local.to(torch.uint8).contiguous()
    pieces = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(pieces, mine, group=group)
    whole = torch.cat(pieces, dim=1).bool()
    # Every sp rank sees the same whole mask and the same features: a mismatch fails on every rank alike.
    if int(whole.sum()) != features.shape[0]:
        raise ValueError(
            f"{int(whole.sum())} placeholders in the whole sequence for {features.shape[0]} tower features: the "
            "towers' inputs must be the whole batch's on every sp rank (shard_multimodal passes them through)"
        )
    ordinals = whole.flatten().cumsum(0).view(whole.shape) - 1
    window = sequence_slice(whole.shape[1], len(pieces), dist.get_rank(group))
    return features[ordinals[:, window][local.bool()].to(features.device)]


def packed_position_ids(documents: Sequence[torch.Tensor]) -> torch.Tensor:
    """The ``[4, 1, L]`` position ids of one row that packs ``documents``, from each one's own multimodal position
    ids ``[3, 1, n]`` (``model.get_position_id_func()`` run on that document alone).

    Row 0 holds the text positions, 0 to n - 1 in each document: transformers reads where each document starts
    from their restarts, and the generated text model then keeps the documents apart on every attention
    implementation (docs/distributed.md, "Packed documents in a VLM or Omni row"); rows 1-3 are the documents'
    own, concatenated. A document that is not one row of three position rows is refused, naming it.
    """
    if not documents:
        raise ValueError("packed_position_ids: no document to pack")
    for index, positions in enumerate(documents):
        if positions.dim() != 3 or positions.shape[0] != 3 or positions.shape[1] != 1:
            raise ValueError(
                f"packed_position_ids: document {index} has position ids of shape {tuple(positions.shape)}; each "
                "document needs its own [3, 1, n], what get_position_id_func() returns for that document alone"
            )
    text = torch.cat([torch.arange(p.shape[-1], dtype=p.dtype, device=p.device) for p in documents]).view(1, 1, -1)
    return torch.cat((text, torch.cat(list(documents), dim=-1)), dim=0)


def packed_text_position_ids(lengths: Sequence[int]) -> torch.Tensor:
    """The ``[1, L]`` position ids of one row that packs documents of these lengths: 0 to n - 1 in each.

    What a composed (LLaVA-style) VLM's language model takes for packed documents: its own 1-D positions,
    restarting at each document, with no attention mask. transformers reads the documents from the restarts, and
    the generated model keeps them apart on every attention implementation (docs/distributed.md, "Packed
    documents in a composed VLM"). A module-level function, so a data loader's workers can pickle it.
    """
    if not lengths or any(int(n) < 1 for n in lengths):
        raise ValueError(f"packed_text_position_ids: every document needs at least one token, got {list(lengths)}")
    return torch.cat([torch.arange(int(n)) for n in lengths]).view(1, -1)


def _slice_last(x: torch.Tensor, total: int, window: slice) -> torch.Tensor:
    """``x`` (sequence last) padded to ``total`` positions with counts continuing ``L, L + 1, ...``, then sliced."""
    length = x.shape[-1]
    extra = torch.arange(length, total, device=x.device, dtype=x.dtype).expand(*x.shape[:-1], -1)
    return torch.cat((x, extra), dim=-1)[..., window]


#: The per-token types a processor returns beside the ids, sliced with them.
TOKEN_TYPES = ("mm_token_type_ids", "token_type_ids")


def shard_multimodal(
    batch: Mapping[str, Any],
    state: ParallelState,
    *,
    pad_token_id: int = 0,
    ignore_index: int = IGNORE_INDEX,
    packed: bool = False,
) -> dict[str, Any]:
    """This sp rank's slice of a VLM or Omni batch: :func:`~modelgraft.models.distributed.sequence.shard_sequence`
    for the text (ids, masks, labels), plus ``position_ids`` of any layout and the per-token types
    (``mm_token_type_ids``, and ``token_type_ids``, which Gemma3's forward gathers back into the whole sequence's
    for its mask) sliced the same way; the towers' inputs and grids pass through whole.

    A batch with images, videos or audio must bring the position ids of the whole sequence (the model's
    ``get_position_id_func()``, run before sharding): refused otherwise, on every rank (a slice cannot number its
    placeholders). A ``[4, B, L]`` layout's text row decides packed documents as one process does
    (``packed=True``: they are described to the attention, as for a text model).
    """
    positions = batch.get("position_ids")
    if positions is None and any(batch.get(name) is not None for name in TOWER_INPUTS):
        raise ValueError(
            "a multimodal batch needs the position ids of the whole sequence before it is sharded: compute them "
            "with model.get_position_id_func() (get_rope_index) and pass them as position_ids"
        )
    text = dict(batch)
    types = {name: text.pop(name) for name in TOKEN_TYPES if text.get(name) is not None}
    whole = {name: text.pop(name) for name in TOWER_INPUTS if name in text}  # shard_sequence refuses them
    rows = None
    if positions is not None and positions.dim() == 3:
        rows = positions
        # The text positions, where the layout has them (row 0 of 4), are what one process reads documents from.
        text["position_ids"] = positions[0] if positions.shape[0] == 4 else None
        if text["position_ids"] is None:
            del text["position_ids"]
    out = shard_sequence(text, state, pad_token_id=pad_token_id, ignore_index=ignore_index, packed=packed)
    length = batch["input_ids"].shape[1] if batch.get("input_ids") is not None else batch["inputs_embeds"].shape[1]
    total = padded_length(length, state.sp)
    window = sequence_slice(length, state.sp, state.sp_rank)
    out.update(whole)
    if rows is not None:
        out["position_ids"] = _slice_last(rows, total, window)
    for name, value in types.items():
        out[name] = F.pad(value, (0, total - length))[:, window]
    return out
