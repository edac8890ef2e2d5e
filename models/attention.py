"""``"fused_attention"``: sdpa attention through torch's fused CPU kernel, for the attention forms upstream's
``"sdpa"`` cannot take or takes through its slow path.

torch's fused (flash) CPU kernel of ``scaled_dot_product_attention`` needs one head width for queries,
keys and values and knows no learned sink. Three attention forms of the MoE zoo miss it upstream:

- Multi-head latent attention (DeepSeek-V3, GLM-MoE-DSA) gives queries and keys a wider head than
  values (nope + rope against the value width: 192 against 128 in DeepSeek-V3). Upstream's ``"sdpa"``
  then runs sdpa's math path, which materializes the ``[B, heads, q, kv]`` scores, their softmax and
  both of their gradients: about 1.7x the fused kernel's time per layer at 512 tokens on CPU. Here the
  narrower side is zero-padded to the wider width: zero value columns add zero output columns (dropped
  afterwards), zero query/key columns add zero to every score (the softmax scale is fixed to the
  unpadded width first).
- Learned per-head sinks (``s_aux``: gpt_oss, DeepSeek-V4) add one logit per head to every softmax
  denominator; upstream supports no sdpa for these models and runs eager attention. Here the sink is one
  more key: queries get a column of ones, keys a column of zeros, and the extra key is zero everywhere
  but that column, where it holds ``sink / scale``, so its score is the sink; its value is zero, so it
  only enters the denominator, as upstream's ``cat([scores, sinks]).softmax()[..., :-1]`` does. Its
  gradient reaches the sink parameter through that one entry.
- A DSA indexer's top-k selection (GLM-MoE-DSA) reaches the attention function as ``indices`` under any
  name but ``"eager"`` and ``"sdpa"`` (upstream builds its mask only under those two names and passes
  the indices on for a sparse kernel). Here every key outside ``indices`` is masked, as upstream's eager
  path masks it.

Masks are eager's (additive floats, ``transformers.masking_utils.eager_mask``), not sdpa's booleans:
DeepSeek-V4 concatenates its compressors' additive block bias onto the mask, which is right for an
additive mask only, and GLM-MoE-DSA then attends exactly as upstream's ``"eager"``. The name holds no
"sdpa": transformers checks any name containing it against the class's ``_supports_sdpa``, which gpt_oss
and DeepSeek-V4 lack.

Results equal upstream's eager attention (and sdpa's where upstream has it) within float rounding: the
fused kernel sums in another order; tests/runtime/test_fused_attention.py holds the tolerances. Forms with
none of the three go straight to transformers' ``sdpa_attention_forward``. Arguments that would change
the result and that sdpa cannot apply (``softcap``, ``block_indices``) are refused with a ``ValueError``
rather than dropped (``UnsupportedAttentionError``, a ``ValueError``).

:func:`register_fused_attention` registers the implementation and eager's mask builder with transformers;
then ``from_pretrained(..., attn_implementation="fused_attention")`` or ``model.set_attn_implementation(
"fused_attention")`` selects it, and the generated attention code stays upstream's (as for Ulysses in
``modelgraft.models.distributed.ulysses``). A generated class calls it itself when a model asks for the
name (its ``get_correct_attn_implementation``, docs/design.md, "Attention implementations on request"), so
nothing registers it on import; any other model needs the explicit call.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask

__all__ = [
    "FUSED_ATTENTION",
    "UnsupportedAttentionError",
    "fused_attention",
    "register_fused_attention",
    "sparse_mask",
]

#: The name the implementation is registered under.
FUSED_ATTENTION = "fused_attention"


class UnsupportedAttentionError(ValueError):
    """The calling attention passes an argument the fused kernel cannot apply (run it with eager instead)."""


def _causal_mask(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """Additive causal mask ``[1, 1, q, kv]``, the last query aligned with the last key (as transformers' masks)."""
    q_length, kv_length = query.shape[2], key.shape[2]
    hidden = torch.ones(q_length, kv_length, dtype=torch.bool, device=query.device).triu(kv_length - q_length + 1)
    return query.new_zeros(1, 1, q_length, kv_length).masked_fill(hidden, torch.finfo(query.dtype).min)


def sparse_mask(
    attention_mask: torch.Tensor | None, indices: torch.Tensor, query: torch.Tensor, key: torch.Tensor
) -> torch.Tensor:
    """``attention_mask`` (causal when None) with every key outside ``indices`` (``[B, q, topk]``) masked,
    as upstream's eager DSA path masks them; boolean masks stay boolean, additive ones additive."""
    batch, _, q_length, _ = query.shape
    dropped = torch.ones(batch, q_length, key.shape[2], dtype=torch.bool, device=query.device)
    dropped = dropped.scatter(-1, indices.long(), False).unsqueeze(1)
    if attention_mask is None:
        attention_mask = _causal_mask(query, key)
    if attention_mask.dtype == torch.bool:  # True: may attend
        return attention_mask & ~dropped
    return attention_mask.masked_fill(dropped, torch.finfo(attention_mask.dtype).min)


def _with_sink_key(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    sinks: torch.Tensor,
    scaling: float,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Queries, keys, values and mask with each head's sink as one more key (see the module docstring).

    Without a mask, ``causal`` says whether sdpa would have applied its causal one (it is made explicit
    here: sdpa's ``is_causal`` would hide the sink key, the last one, from every query but the last).
    """
    batch, heads, q_length, width = query.shape
    key = repeat_kv(key, heads // key.shape[1])
    value = repeat_kv(value, heads // value.shape[1])
    if attention_mask is None and causal:
        attention_mask = _causal_mask(query, key)
    query = torch.cat((query, query.new_ones(batch, heads, q_length, 1)), dim=-1)
    key = torch.cat((key, key.new_zeros(*key.shape[:-1], 1)), dim=-1)
    sink_key = torch.cat(
        (
            key.new_zeros(batch, heads, 1, width),
            (sinks.to(key.dtype) / scaling).view(1, heads, 1, 1).expand(batch, heads, 1, 1),
        ),
        dim=-1,
    )
    key = torch.cat((key, sink_key), dim=2)
    value = torch.cat((value, value.new_zeros(batch, heads, 1, value.shape[-1])), dim=2)
    if attention_mask is not None:  # the sink key is visible to every query
        attention_mask = F.pad(attention_mask, (0, 1), value=True if attention_mask.dtype == torch.bool else 0.0)
    return query, key, value, attention_mask


def _pad_last(x: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(x, (0, width - x.shape[-1])) if x.shape[-1] < width else x


#: Arguments some upstream attentions pass that change the result and that sdpa would drop silently:
#: logit soft-capping (Gemma-2 and its kin), and a block-sparse selection (MiniMax-M3-VL).
_UNSUPPORTED = ("softcap", "block_indices")

#: Stands in for the calling module once keys and values carry every query head (no repeat left to do).
#: Any causal mask is explicit by then.
_SAME_HEADS = SimpleNamespace(num_key_value_groups=1, is_causal=False)


def fused_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    indices: torch.Tensor | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ``[B, heads, q, D]`` inputs, ``[B, q, heads, Dv]`` output.

    Register it with :func:`register_fused_attention`.

    ``indices`` (``[B, q, topk]``): the only keys each query may attend to (a DSA indexer's top-k).
    ``s_aux`` (``[heads]``): learned sink logits, one per head.
    """
    unsupported = sorted(name for name in _UNSUPPORTED if kwargs.get(name) is not None)
    if unsupported:
        raise UnsupportedAttentionError(
            f"fused_attention: {type(module).__name__} passes {', '.join(unsupported)}, which the fused kernel "
            "cannot apply; use attn_implementation='eager'"
        )
    query_width, value_width = query.shape[-1], value.shape[-1]
    if key.shape[-1] != query_width:
        raise ValueError(f"fused_attention: queries ({query_width}) and keys ({key.shape[-1]}) need one head width")
    if scaling is None:  # sdpa's default, taken before any padding widens the head
        scaling = query_width**-0.5
    if indices is not None:
        attention_mask = sparse_mask(attention_mask, indices, query, key)
    if s_aux is not None:
        causal = query.shape[2] > 1 and getattr(module, "is_causal", True)
        query, key, value, attention_mask = _with_sink_key(query, key, value, attention_mask, s_aux, scaling, causal)
        module = _SAME_HEADS
    width = max(query.shape[-1], value_width)
    output, weights = sdpa_attention_forward(
        module,
        _pad_last(query, width),
        _pad_last(key, width),
        _pad_last(value, width),
        attention_mask,
        scaling=scaling,
        **kwargs,
    )
    return (output[..., :value_width] if width != value_width else output), weights


def register_fused_attention() -> str:
    """Register ``"fused_attention"`` (:func:`fused_attention` and eager's mask builder) with transformers.

    Returns the name.

    Registration is process-wide and idempotent; call it before building or loading a model with it. A
    generated class calls it when asked for the name (docs/design.md, "Attention implementations on request").
    """
    AttentionInterface.register(FUSED_ATTENTION, fused_attention)
    AttentionMaskInterface.register(FUSED_ATTENTION, eager_mask)
    return FUSED_ATTENTION
