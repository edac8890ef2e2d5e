"""Ulysses sequence parallelism as attention implementations registered with transformers.

Under sequence parallelism every rank of the sp group holds a contiguous slice of each sequence
(``models.distributed.sequence.shard_sequence``). Everything in a decoder layer is per token except
attention, so only attention needs the other slices. :func:`register_ulysses` registers, for a
parallel state, the attention implementations ``"ulysses_sdpa"`` and ``"ulysses_eager"`` with
transformers' ``AttentionInterface`` (and their mask builders with ``AttentionMaskInterface``). A model
built with ``attn_implementation="ulysses_sdpa"`` runs its generated attention code unchanged; when it
reaches ``ALL_ATTENTION_FUNCTIONS.get_interface(...)`` it calls:

1. all-to-all of q, k, v from ``[B, heads, S/sp, D]`` (sequence-sharded) to ``[B, heads/sp, S, D]``
   (head-sharded): each rank now sees whole sequences for a subset of the heads;
2. the wrapped implementation (transformers' ``sdpa_attention_forward``, or the model's own
   ``eager_attention_forward``) with the mask of the whole sequence;
3. the inverse all-to-all of the output, back to ``[B, S/sp, heads, D]``.

The mask builder receives each rank's slice of the 2-D padding mask, gathers the whole one over the sp
group and hands it to transformers' own ``sdpa_mask`` / ``eager_mask`` with the whole sequence's
lengths, so the mask is exactly the one a single process builds. Key/value heads that do not divide
by ``sp`` are repeated to the query heads first. Limits: no KV cache (training forwards), no packed
sequences (position ids that restart inside a row), and the head count must divide by ``sp``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import ProcessGroup
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

from models.distributed.collectives import all_to_all
from models.distributed.mesh import ParallelConfigError, ParallelState

__all__ = ["ULYSSES_IMPLEMENTATIONS", "heads_to_sequence", "register_ulysses", "sequence_to_heads"]

#: Implementation name -> the wrapped transformers implementation.
ULYSSES_IMPLEMENTATIONS = {"ulysses_sdpa": "sdpa", "ulysses_eager": "eager"}


def sequence_to_heads(x: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
    """``[B, H, S/sp, D]`` on every rank -> ``[B, H/sp, S, D]``: rank r keeps heads ``[r*H/sp, (r+1)*H/sp)``."""
    sp = dist.get_world_size(group)
    batch, heads, length, dim = x.shape
    if heads % sp:
        raise ParallelConfigError(f"Ulysses needs the head count ({heads}) to divide by sp={sp}")
    chunks = x.reshape(batch, sp, heads // sp, length, dim).transpose(0, 1)  # [sp (head group), B, H/sp, s, D]
    received = all_to_all(chunks, group)  # [sp (sequence slice), B, H/sp, s, D]
    return received.permute(1, 2, 0, 3, 4).reshape(batch, heads // sp, sp * length, dim)


def heads_to_sequence(x: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
    """``[B, S, H/sp, D]`` (attention output layout) -> ``[B, S/sp, H, D]``, the inverse exchange."""
    sp = dist.get_world_size(group)
    batch, length, heads, dim = x.shape
    chunks = x.reshape(batch, sp, length // sp, heads, dim).transpose(0, 1)  # [sp (sequence slice), B, s, H/sp, D]
    received = all_to_all(chunks, group)  # [sp (head group), B, s, H/sp, D]
    return received.permute(1, 2, 0, 3, 4).reshape(batch, length // sp, sp * heads, dim)


class _HeadsRepeated:
    """The attention module as the wrapped implementation sees it once k/v were repeated to every head."""

    def __init__(self, module: nn.Module) -> None:
        self._module = module
        self.num_key_value_groups = 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _generic_eager(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    key = repeat_kv(key, module.num_key_value_groups)
    value = repeat_kv(value, module.num_key_value_groups)
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def _eager_of(module: nn.Module) -> Callable[..., Any]:
    """The model's own eager attention (soft-capping and other quirks included), else the standard one."""
    return getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", _generic_eager)


def _attention(wrapped: str, group: ProcessGroup) -> Callable[..., Any]:
    def ulysses_attention(
        module: nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        inner = sdpa_attention_forward if wrapped == "sdpa" else _eager_of(module)
        sp = dist.get_world_size(group)
        target: Any = module
        if key.shape[1] % sp:
            groups = query.shape[1] // key.shape[1]
            key, value, target = repeat_kv(key, groups), repeat_kv(value, groups), _HeadsRepeated(module)
        query, key, value = (sequence_to_heads(t, group) for t in (query, key, value))
        output, _ = inner(target, query, key, value, attention_mask, **kwargs)
        return heads_to_sequence(output, group), None

    ulysses_attention.__name__ = f"ulysses_{wrapped}_attention"
    return ulysses_attention


def _mask(wrapped: str, group: ProcessGroup) -> Callable[..., Any]:
    inner = sdpa_mask if wrapped == "sdpa" else eager_mask

    def ulysses_mask(
        batch_size: int,
        q_length: int,
        kv_length: int,
        q_offset: int = 0,
        kv_offset: int = 0,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> torch.Tensor | None:
        if q_offset or kv_offset or kv_length != q_length:
            raise NotImplementedError("Ulysses attention supports forwards without a KV cache only (use_cache=False)")
        sp = dist.get_world_size(group)
        if attention_mask is not None:
            local = attention_mask.to(torch.uint8).contiguous()
            pieces = [torch.empty_like(local) for _ in range(sp)]
            dist.all_gather(pieces, local, group=group)
            attention_mask = torch.cat(pieces, dim=-1).bool()
        return inner(
            batch_size=batch_size,
            q_length=q_length * sp,
            kv_length=kv_length * sp,
            attention_mask=attention_mask,
            **kwargs,
        )

    return ulysses_mask


def register_ulysses(state: ParallelState) -> tuple[str, ...]:
    """Register ``"ulysses_sdpa"`` / ``"ulysses_eager"`` over ``state``'s sp group; returns the names.

    Build the model with ``attn_implementation="ulysses_sdpa"`` (or set ``config._attn_implementation``)
    after this call. Registration is process-wide; registering again rebinds the names to the new state.
    """
    for name, wrapped in ULYSSES_IMPLEMENTATIONS.items():
        AttentionInterface.register(name, _attention(wrapped, state.sp_group))
        AttentionMaskInterface.register(name, _mask(wrapped, state.sp_group))
    return tuple(ULYSSES_IMPLEMENTATIONS)
