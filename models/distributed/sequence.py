"""Sequence-parallel helpers: slice a batch per sp rank, and move hidden states between slices and wholes.

``shard_sequence(batch, state)`` pads every sequence tensor of a causal-LM batch to a multiple of ``sp``
(pad id, attention mask 0, label ``-100``) and keeps this rank's contiguous slice of each, adding the
``position_ids`` of the whole sequence (a rank cannot infer them from its slice) and ``shift_labels``
(next-token targets shifted before slicing, so no target is lost at a slice boundary). A 2-D attention mask
is sliced like the tokens; a mask already prepared for attention (4-D, or a dict of them by attention type)
stays whole on every rank, padded to the multiple of ``sp``, since Ulysses attention attends over the whole
sequence (transformers passes a 4-D mask on to attention as it is). The model is
then called on the slice as usual; with the ``global_batch`` loss kernel bound, its loss is the loss of
the whole batch (``modelgraft.models.distributed.losses``).

Under ``sp > 1`` the returned batch always holds a 2-D ``attention_mask`` (ones where none was given, 0 at
the padding): given no mask, transformers reads position ids that restart as packed documents, and from a
slice it would read them wrong. Such packed batches (no mask, ``position_ids`` of the whole sequence that
restart inside a row) are refused, unless ``packed=True``: then the document ids of the whole sequence are
returned as ``packed_document_ids``, which a model attached with ``attach_ulysses`` (or
``attach_parallel``) hands to its mask builder, so attention gets one process's packed mask. The padding sits at
the end of every row, where causal masking already hides it from every real query, so Ulysses attention
builds no padding mask for it (``modelgraft.models.distributed.ulysses``); the 2-D mask and the ``-100``
labels keep it out of the losses. ``shard_sequence`` is collective over the data group: its
checks run inside ``modelgraft.models.distributed.guard.fail_together``, so a batch refused on one rank
(its own rows) is refused on every rank, before any of them enters the model's collectives.

``gather_sequence`` / ``scatter_sequence`` move activations between a slice and the whole sequence
with autograd (all-gather <-> reduce-scatter), for code that needs the whole sequence at some point,
such as a multimodal forward merging image features into text positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from transformers.masking_utils import find_packed_sequence_indices

from modelgraft.models.distributed.collectives import all_gather, scatter
from modelgraft.models.distributed.guard import fail_together
from modelgraft.models.distributed.mesh import ParallelState
from modelgraft.models.distributed.ulysses import DOCUMENT_IDS
from modelgraft.models.ops.kernels.loss_inputs import shift_causal_labels

__all__ = ["gather_sequence", "padded_length", "scatter_sequence", "sequence_slice", "shard_sequence"]

IGNORE_INDEX = -100


def padded_length(length: int, sp: int) -> int:
    """The smallest multiple of ``sp`` that holds ``length`` positions."""
    return -(-length // sp) * sp


def sequence_slice(length: int, sp: int, sp_rank: int) -> slice:
    """Rank ``sp_rank``'s positions of a sequence padded from ``length`` to a multiple of ``sp``."""
    chunk = padded_length(length, sp) // sp
    return slice(sp_rank * chunk, (sp_rank + 1) * chunk)


def _pad(x: torch.Tensor, length: int, value: float, dim: int = 1) -> torch.Tensor:
    missing = length - x.shape[dim]
    if missing == 0:
        return x
    pad = [0, 0] * (x.ndim - 1 - dim % x.ndim) + [0, missing]
    return F.pad(x, pad, value=value)


def _mask_of_rank(mask: Any, length: int, total: int, window: slice) -> Any:
    if isinstance(mask, Mapping):
        return {name: None if m is None else _mask_of_rank(m, length, total, window) for name, m in mask.items()}
    if mask.dim() != 4:
        return _pad(mask, total, 0)[:, window]
    if mask.shape[-2:] == (total, total):
        return mask
    if mask.shape[-2:] != (length, length):
        raise ValueError(
            f"attention_mask of shape {tuple(mask.shape)}: a 4-D mask must cover the whole sequence without a "
            f"cache, [batch, heads, {length}, {length}] (or {total} x {total}, padded for sp)"
        )
    masked = False if mask.dtype == torch.bool else torch.finfo(mask.dtype).min
    mask = _pad(mask, total, masked, dim=-1)
    # A padding query attends what the last one does (never nothing, which would give NaN), never itself.
    last = mask[..., -1:, :]
    return torch.cat((mask, last.expand(*last.shape[:-2], total - length, total)), dim=-2)


def shard_sequence(
    batch: Mapping[str, Any],
    state: ParallelState,
    *,
    pad_token_id: int = 0,
    ignore_index: int = IGNORE_INDEX,
    packed: bool = False,
) -> dict[str, Any]:
    """This sp rank's slice of a ``[batch, seq]`` causal-LM batch (``input_ids``, ``attention_mask``, ``labels``,
    optionally ``position_ids`` or ``inputs_embeds``); other entries are passed through unchanged.

    Returns the sliced tensors plus ``position_ids`` and, when ``labels`` are given, ``shift_labels``.
    An ``attention_mask`` is created when none was given and padding is needed or ``sp > 1``. A 4-D
    ``[batch, heads, seq, seq]`` mask, or a dict of them, is returned whole, padded to ``[batch, heads,
    padded, padded]``.

    Packed rows (no attention mask, ``position_ids`` that restart inside a row: one process reads them as
    documents that must not attend to each other) are refused under ``sp > 1`` unless ``packed``; with it,
    their document ids ``[batch, padded]`` of the whole sequence are returned as ``packed_document_ids``,
    for a model attached with ``attach_ulysses`` / ``attach_parallel``.

    Collective over ``state``'s data group (every rank calls it once per batch): a batch this rank
    cannot shard (packed documents under ``sp > 1``, a 4-D mask of the wrong shape) raises its error
    here and :class:`~modelgraft.models.distributed.guard.PeerFailedError` on every other rank.
    """
    # A stand-in state without groups (one process playing an sp rank) has no peers to tell.
    with fail_together(getattr(state, "data_group", None), "shard_sequence"):
        return _shard_sequence(batch, state, pad_token_id=pad_token_id, ignore_index=ignore_index, packed=packed)


def _refuse_packed(documents: torch.Tensor, sp: int) -> None:
    rows = sorted({int(row) for row in (documents[:, -1] > 0).nonzero()[:, 0]})
    raise ValueError(
        f"packed sequences are not supported under Ulysses sequence parallelism (sp={sp}) without packed=True: the "
        f"position_ids of row(s) {rows} restart inside the row, which one process reads as several documents that "
        "must not attend to each other. Pass one document per row, or shard_sequence(..., packed=True) for a model "
        "attached with attach_ulysses / attach_parallel"
    )


def _shard_sequence(
    batch: Mapping[str, Any], state: ParallelState, *, pad_token_id: int, ignore_index: int, packed: bool
) -> dict[str, Any]:
    towers = [
        name for name in ("pixel_values", "pixel_values_videos", "input_features") if batch.get(name) is not None
    ]
    if towers and state.sp > 1:
        raise ValueError(
            f"a multimodal batch ({', '.join(towers)}) needs its multimodal position ids and placeholder types sliced "
            "too: shard it with modelgraft.models.distributed.shard_multimodal"
        )
    reference = batch["input_ids"] if batch.get("input_ids") is not None else batch["inputs_embeds"]
    batch_size, length = reference.shape[:2]
    total = padded_length(length, state.sp)
    window = sequence_slice(length, state.sp, state.sp_rank)
    out = dict(batch)

    position_ids = batch.get("position_ids")
    attention_mask = batch.get("attention_mask")
    given_positions = position_ids is not None
    if position_ids is None:
        position_ids = torch.arange(length, device=reference.device).unsqueeze(0).expand(batch_size, -1)
    # Padding positions continue the count: they are masked out, and the rotary tables cover them.
    extra = torch.arange(length, total, device=reference.device).expand(position_ids.shape[0], -1)
    whole_positions = torch.cat((position_ids, extra.to(position_ids.dtype)), dim=-1)
    out["position_ids"] = whole_positions[:, window]
    # Documents are read as one process reads them (given no mask), from the whole sequence's position ids, so
    # every sp rank decides alike, also for a restart exactly on a slice boundary.
    if given_positions and attention_mask is None and state.sp > 1:
        documents = find_packed_sequence_indices(position_ids.expand(batch_size, -1))
        if documents is not None and not packed:
            _refuse_packed(documents, state.sp)
        if documents is not None:  # the padding, continuing the count, is a document of its own
            out[DOCUMENT_IDS] = find_packed_sequence_indices(whole_positions.expand(batch_size, -1))

    # Under sp > 1 always a mask: without one, transformers would read restarts in this rank's slice of the
    # position ids as packed documents of a sequence it only holds a slice of.
    if attention_mask is None and state.sp > 1:
        attention_mask = torch.ones(batch_size, length, dtype=torch.long, device=reference.device)
    if attention_mask is not None:
        out["attention_mask"] = _mask_of_rank(attention_mask, length, total, window)
    if batch.get("input_ids") is not None:
        out["input_ids"] = _pad(batch["input_ids"], total, pad_token_id)[:, window]
    if batch.get("inputs_embeds") is not None:
        out["inputs_embeds"] = _pad(batch["inputs_embeds"], total, 0.0)[:, window]
    labels = batch.get("labels")
    if labels is not None:
        padded = _pad(labels, total, ignore_index)
        out["labels"] = padded[:, window]
        out["shift_labels"] = shift_causal_labels(padded, ignore_index)[:, window]
    return out


def gather_sequence(x: torch.Tensor, state: ParallelState, *, dim: int = 1, length: int | None = None) -> torch.Tensor:
    """The whole sequence from every sp rank's slice of ``x`` along ``dim``, trimmed to ``length``
    (the unpadded length) when given. Backward sums the gradients and keeps this rank's slice."""
    whole = all_gather(x, dim, state.sp_group) if state.sp > 1 else x
    if length is not None:
        whole = whole.narrow(dim, 0, length)
    return whole


def scatter_sequence(x: torch.Tensor, state: ParallelState, *, dim: int = 1, pad_value: float = 0.0) -> torch.Tensor:
    """This sp rank's slice of ``x`` (the same whole sequence on every rank), padded along ``dim`` to a
    multiple of ``sp`` first. Backward all-gathers the slices' gradients."""
    if state.sp == 1:
        return x
    x = _pad(x, padded_length(x.shape[dim], state.sp), pad_value, dim=dim)
    return scatter(x, dim, state.sp_group)
