"""``"mla_sdpa"``: transformers' sdpa attention for heads whose query and value widths differ.

Multi-head latent attention (DeepSeek-V3, GLM-MoE-DSA) gives queries and keys a wider head than values
(nope + rope dims against the value dim: 192 against 128 in DeepSeek-V3). torch's fused (flash) CPU
kernel of ``scaled_dot_product_attention`` needs one head width for all three, so with upstream's
``"sdpa"`` such a model runs sdpa's math path: it materializes the ``[B, heads, q, kv]`` scores, their
softmax and both of their gradients, about twice the time of the fused kernel at 512 tokens on CPU
(docs/performance.md, MoE section).

``mla_sdpa_attention`` zero-pads the narrower side to the wider width and calls transformers' own
``sdpa_attention_forward``, so the fused kernel applies; then it drops the padding from the output.
Padding values with zero columns adds zero output columns; padding queries and keys with zero columns
adds zero to every score (the softmax scale is fixed to the unpadded width first). The result equals
sdpa's within float rounding (the two kernels sum in different orders), not bitwise; the gradients of
the padding are dropped by ``F.pad``'s backward. Equal widths go straight to ``sdpa_attention_forward``.

Masks are eager's (additive floats, ``transformers.masking_utils.eager_mask``), not sdpa's booleans, and
a sparse selection passed as ``indices`` is honoured. Both are for DSA models (GLM-MoE-DSA): their
upstream attention turns the indexer's top-k ``indices`` into a mask only under the names ``"eager"``
and ``"sdpa"`` and passes them on unapplied under any other name (for a sparse kernel), and their
indexer adds the attention mask to its scores, which is right for an additive mask only. Under
upstream's ``"sdpa"`` both go wrong in transformers 5.16.1: ``masked_fill(..., finfo.min)`` on a boolean
mask writes True, so masked keys (later tokens included) become visible, and the indexer adds 1 for
every visible key. With ``"mla_sdpa"`` such a model attends like upstream's ``"eager"``.

:func:`register_mla_sdpa` registers the implementation and eager's mask builder with transformers under
``"mla_sdpa"``; then ``from_pretrained(..., attn_implementation="mla_sdpa")`` or
``model.set_attn_implementation("mla_sdpa")`` selects it, and the generated attention code stays
upstream's (design section 3, as for Ulysses in ``models.distributed.ulysses``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask

__all__ = ["MLA_SDPA", "mla_sdpa_attention", "register_mla_sdpa"]

#: The name the implementation is registered under.
MLA_SDPA = "mla_sdpa"


def _sparse_mask(
    attention_mask: torch.Tensor | None, indices: torch.Tensor, query: torch.Tensor, key: torch.Tensor
) -> torch.Tensor:
    """``attention_mask`` with every key outside ``indices`` masked, as upstream's eager DSA path builds it."""
    batch, _, q_length, _ = query.shape
    kv_length = key.shape[2]
    dropped = torch.ones(batch, q_length, kv_length, dtype=torch.bool, device=query.device)
    dropped = dropped.scatter(-1, indices.long(), False).unsqueeze(1)
    if attention_mask is None:  # causal, the last query aligned with the last key
        attention_mask = query.new_zeros(1, 1, q_length, kv_length)
        dropped = dropped | torch.ones(q_length, kv_length, dtype=torch.bool, device=query.device).triu(
            kv_length - q_length + 1
        )
    if attention_mask.dtype == torch.bool:  # True: may attend
        return attention_mask & ~dropped
    return attention_mask.masked_fill(dropped, torch.finfo(attention_mask.dtype).min)


def _pad_last(x: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(x, (0, width - x.shape[-1])) if x.shape[-1] < width else x


def mla_sdpa_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    indices: torch.Tensor | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ``[B, heads, q, D]`` inputs, ``[B, q, heads, Dv]`` output.

    ``indices`` (``[B, q, topk]``, optional): the keys each query may attend to (a DSA indexer's top-k);
    every other key is masked, on top of ``attention_mask``.
    """
    if indices is not None:
        attention_mask = _sparse_mask(attention_mask, indices, query, key)
    query_width, value_width = query.shape[-1], value.shape[-1]
    if key.shape[-1] != query_width:
        raise ValueError(f"mla_sdpa: queries ({query_width}) and keys ({key.shape[-1]}) need one head width")
    if query_width == value_width:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    if scaling is None:  # sdpa's default, taken before the padding widens the head
        scaling = query_width**-0.5
    width = max(query_width, value_width)
    output, weights = sdpa_attention_forward(
        module,
        _pad_last(query, width),
        _pad_last(key, width),
        _pad_last(value, width),
        attention_mask,
        scaling=scaling,
        **kwargs,
    )
    return output[..., :value_width], weights


def register_mla_sdpa() -> str:
    """Register ``"mla_sdpa"`` (attention and mask builder) with transformers; returns the name.

    Registration is process-wide and idempotent; call it before building or loading a model with it.
    """
    AttentionInterface.register(MLA_SDPA, mla_sdpa_attention)
    AttentionMaskInterface.register(MLA_SDPA, eager_mask)
    return MLA_SDPA
