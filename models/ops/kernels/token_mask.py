"""Which tokens of a batch are real, from any form of ``attention_mask`` transformers 5 passes a model.

Statistics over tokens (the MoE aux loss) need a ``[batch, seq]`` mask of real tokens, the form
upstream's ``load_balancing_loss_func`` reads. transformers 5 also accepts, and passes on unchanged to the
causal LM's loss code, masks already prepared for attention: a 4-D ``[batch, heads or 1, queries, keys]``
mask, or a dict of them keyed by attention type (``{"full_attention": ..., "sliding_attention": ...}``).
Upstream's function fails on those (a dict has no ``reshape``; a 4-D mask has ``queries x keys`` entries
per sequence, not one per token).

Every mask transformers builds is a pattern (causal, sliding, chunked, bidirectional, packed documents)
combined with the padding of the keys, and every such pattern lets a query attend to its own position.
So the entry of query ``i`` at its own key position holds exactly whether token ``i`` is real: the
diagonal, read at the last ``queries`` keys (a cache puts earlier positions in front). A boolean mask
attends where True; a float mask is additive, attending where it is 0 (transformers fills the rest with
the dtype's minimum or -inf).

Under sequence parallelism a rank holds a contiguous slice of each sequence, and the mask it is called with
covers more than that slice: Ulysses attention needs the whole sequence's mask on every rank, so rank ``r``'s
own diagonal entries sit at queries and keys ``r * chunk`` onwards, not at the last ones.
:func:`slice_real_token_mask` reads them there; it refuses a mask whose shape matches no slice it knows,
since reading the last-keys diagonal of a mask it does not understand would count the wrong tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["real_token_mask", "slice_real_token_mask"]


def real_token_mask(attention_mask: Any) -> torch.Tensor | None:
    """``attention_mask`` as the ``[batch, seq]`` mask of real tokens that upstream's aux loss reads.

    None and 2-D masks are returned unchanged (upstream's own input). A 4-D mask becomes its diagonal
    (1 for a real token, 0 for padding, in the mask's float dtype, or bool). A dict gives the diagonal of its
    masks, which must agree, since padding is the same for every attention type; a dict holding only None
    (no mask needed: no padding) gives None. Other forms (flex attention's ``BlockMask``) raise ``TypeError``.
    """
    if attention_mask is None:
        return None
    if isinstance(attention_mask, Mapping):
        return _from_dict(attention_mask)
    if not torch.is_tensor(attention_mask):
        raise TypeError(
            f"attention_mask: expected None, a tensor or a dict of tensors, got {type(attention_mask).__name__} "
            "(a flex-attention BlockMask holds no per-token padding to read)"
        )
    if attention_mask.dim() == 4:
        return _last_keys_diagonal(attention_mask)
    return attention_mask


def slice_real_token_mask(
    attention_mask: Any, *, num_tokens: int, sp_rank: int = 0, sp: int = 1
) -> torch.Tensor | None:
    """The ``[batch, chunk]`` real tokens of sp rank ``sp_rank``'s slice of each sequence, ``num_tokens`` being
    ``batch * chunk``, the tokens this rank holds (its router-logit rows): what the global-batch aux loss needs
    on a rank whose mask may cover the whole sequence (``modelgraft.models.distributed.losses``).

    Accepted forms, for sequences of ``sp * chunk`` positions (after ``shard_sequence``'s padding):

    * None (no padding): None;
    * a 2-D ``[batch, chunk]`` mask, this rank's slice (``shard_sequence``'s): returned unchanged;
    * a 4-D ``[batch, heads or 1, sp * chunk, keys]`` mask of the whole sequence, the form Ulysses attention
      takes: the diagonal of the rank's queries ``r * chunk ...``;
    * a 4-D ``[batch, heads or 1, chunk, keys]`` mask of this rank's queries against the whole sequence's keys
      (for attention that keeps queries sharded; Ulysses cannot run on it): the diagonal at keys ``r * chunk ...``;
    * a dict of such masks by attention type, which must agree.

    With ``sp == 1`` these are :func:`real_token_mask`'s diagonal. Keys beyond the whole sequence are
    taken to be cached positions in front, as there. Any other form raises ``ValueError`` (``TypeError``
    for a type that holds no per-token padding) naming the shape and what was expected.
    """
    if attention_mask is None:
        return None
    if isinstance(attention_mask, Mapping):
        return _agreeing(
            {
                name: slice_real_token_mask(mask, num_tokens=num_tokens, sp_rank=sp_rank, sp=sp)
                for name, mask in attention_mask.items()
            }
        )
    if not torch.is_tensor(attention_mask):
        return real_token_mask(attention_mask)  # raises the TypeError that names the form
    if not 0 <= sp_rank < sp:
        raise ValueError(f"sp_rank must be in [0, {sp}), got {sp_rank}")
    shape = tuple(attention_mask.shape)
    where = f" on sp rank {sp_rank} of {sp}" if sp > 1 else ""
    if attention_mask.dim() not in (2, 4) or num_tokens % shape[0]:
        raise ValueError(
            f"attention_mask of shape {shape}: expected a 2-D [batch, seq] or 4-D [batch, heads, queries, keys] "
            f"mask whose batch divides the {num_tokens} tokens held{where}"
        )
    chunk = num_tokens // shape[0]
    whole = sp * chunk
    if attention_mask.dim() == 2:
        if shape[1] != chunk:
            raise ValueError(
                f"attention_mask of shape {shape}: expected [{shape[0]}, {chunk}], the mask of the {chunk} positions "
                f"per sequence held{where}" + (" (shard_sequence's slice)" if sp > 1 else "")
            )
        return attention_mask
    queries, keys = shape[2], shape[3]
    if queries not in (whole, chunk) or keys < whole:
        expected = f"[{shape[0]}, heads, {whole}, >= {whole}]"
        if sp > 1:
            expected += f" (the whole sequence's) or [{shape[0]}, heads, {chunk}, >= {whole}] (this rank's queries)"
        raise ValueError(
            f"attention_mask of shape {shape}: expected {expected} for {chunk} positions per sequence held{where}"
        )
    start = sp_rank * chunk
    return _diagonal(attention_mask, start if queries == whole else 0, keys - whole + start, chunk)


def _from_dict(masks: Mapping[str, Any]) -> torch.Tensor | None:
    return _agreeing({name: real_token_mask(mask) for name, mask in masks.items()})


def _agreeing(masks: Mapping[str, torch.Tensor | None]) -> torch.Tensor | None:
    found = {name: mask for name, mask in masks.items() if mask is not None}
    if not found:
        return None
    (first_name, first), *others = found.items()
    for name, mask in others:
        if mask.shape != first.shape or not torch.equal(mask.bool(), first.bool()):
            raise ValueError(
                f"attention_mask[{first_name!r}] and attention_mask[{name!r}] disagree on which tokens are "
                "padding; every attention type masks the same padding"
            )
    return first


def _last_keys_diagonal(mask: torch.Tensor) -> torch.Tensor:
    queries, keys = mask.shape[-2], mask.shape[-1]
    if keys < queries:
        raise ValueError(f"attention_mask: a 4-D mask with {queries} queries but only {keys} keys")
    return _diagonal(mask, 0, keys - queries, queries)


def _diagonal(mask: torch.Tensor, first_query: int, first_key: int, count: int) -> torch.Tensor:
    """Whether each of ``count`` queries from ``first_query`` attends to its own position, key ``first_key``
    onwards: ``[batch, count]``."""
    own = torch.arange(count, device=mask.device)
    diagonal = mask[:, 0, own + first_query, own + first_key]
    if diagonal.dtype == torch.bool:
        return diagonal
    return (diagonal == 0).to(diagonal.dtype)
