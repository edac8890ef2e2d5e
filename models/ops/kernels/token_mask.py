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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["real_token_mask"]


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
        return _diagonal(attention_mask)
    return attention_mask


def _from_dict(masks: Mapping[str, Any]) -> torch.Tensor | None:
    found = {name: real_token_mask(mask) for name, mask in masks.items() if mask is not None}
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


def _diagonal(mask: torch.Tensor) -> torch.Tensor:
    """Whether each query attends to its own position: ``[batch, queries]``."""
    queries, keys = mask.shape[-2], mask.shape[-1]
    if keys < queries:
        raise ValueError(f"attention_mask: a 4-D mask with {queries} queries but only {keys} keys")
    own = torch.arange(queries, device=mask.device)
    diagonal = mask[:, 0, own, own + (keys - queries)]
    if diagonal.dtype == torch.bool:
        return diagonal
    return (diagonal == 0).to(diagonal.dtype)
