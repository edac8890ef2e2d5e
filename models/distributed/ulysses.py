"""Ulysses sequence parallelism as attention implementations registered with transformers.

Under sequence parallelism every rank of the sp group holds a contiguous slice of each sequence
(``modelgraft.models.distributed.sequence.shard_sequence``). Everything in a decoder layer is per token except
attention, so only attention needs the other slices (and, in hybrid models, the Gated DeltaNet layers' conv
and delta rule: ``modelgraft.models.distributed.linear_attention``, bound by ``parallel_ops``).
:func:`register_ulysses` registers, for a parallel state, the attention implementations ``"ulysses_sdpa"``
and ``"ulysses_eager"`` with transformers' ``AttentionInterface`` (and their mask builders with ``AttentionMaskInterface``). A model
built with ``attn_implementation="ulysses_sdpa"`` runs its generated attention code unchanged; when it
reaches ``ALL_ATTENTION_FUNCTIONS.get_interface(...)`` it calls:

1. all-to-all of q, k, v from ``[B, heads, S/sp, D]`` (sequence-sharded) to ``[B, heads/sp, S, D]``
   (head-sharded): each rank now sees whole sequences for a subset of the heads;
2. the wrapped implementation (transformers' ``sdpa_attention_forward``, or the model's own
   ``eager_attention_forward``) with the mask of the whole sequence;
3. the inverse all-to-all of the output, back to ``[B, S/sp, heads, D]``.

The mask builder receives each rank's slice of the 2-D padding mask, gathers the whole one over the sp
group and hands it to transformers' own ``sdpa_mask`` / ``eager_mask`` with the whole sequence's
lengths, so the mask is the one a single process builds, except that padding of the last positions of
every row together (what ``shard_sequence`` adds to reach a multiple of ``sp``) is left out: causal
masking already hides it from every real query, so sdpa runs with no mask at all (``is_causal``) instead
of a dense ``[B, 1, S, S]`` one. (A padding query's output is then unspecified; its label is ``-100``.)
Any other padding (left padding, rows of different lengths) keeps its mask, as in one process. The 2-D
mask still reaches the losses.

The builder needs that 2-D mask under ``sp > 1``: without one, transformers reads position ids that
restart in a rank's slice as packed documents, which a slice cannot describe. Packed rows are refused by
``shard_sequence``, or, with ``shard_sequence(..., packed=True)``, described by the document ids of the
whole sequence (``packed_document_ids``): a model attached with :func:`attach_ulysses` takes them out of its
call's keywords (a forward pre-hook) and its mask builder adds transformers' packed-sequence mask function
with them, as one process does from the whole position ids. The builder's work after the mask's
all-gather runs inside ``modelgraft.models.distributed.guard.fail_together``, so a rank that fails there
stops every rank.

Key/value heads that do not divide by ``sp`` are repeated, each as few times as makes them divide
(to the least common multiple of the k/v head count and ``sp``), keeping the query-to-key grouping.
Per-head sinks (gpt_oss, DeepSeek-V4: ``s_aux`` and the module's ``sinks``) are sliced to the rank's heads.
``"ulysses_fused_attention"`` wraps ``modelgraft.models.attention.fused_attention`` (with eager's mask
builder, as that implementation has).

A DSA indexer's top-k ``indices`` (GLM-MoE-DSA) are gathered over the sp group with the heads exchange;
they address keys of the whole sequence when ``modelgraft.models.distributed.parallel_ops`` has bound the indexer's
``sp_gather`` kernel (``modelgraft.models.distributed.sparse_indexer``), which scores each rank's queries against every
rank's keys. ``fused_attention`` applies them; for sdpa and eager they become the mask upstream's eager
path builds.

The parallel state is either process-wide (:func:`register_ulysses`: the names above, bound to one state)
or one model's (:func:`attach_ulysses`: the model's config names an implementation registered for its own
state, so models with different parallel settings, or none, run side by side in one process).

Limits: no KV cache (training forwards), packed rows only through :func:`attach_ulysses` (above), and the
head count must divide by ``sp``. Refused with ``NotImplementedError`` when the mask is built:
compressed-attention layers (DeepSeek-V4 appends compressed entries of the rank's own slice to the keys),
and a DSA model (a config with ``index_topk``) without the ``sp_gather`` indexer. The attention function
also refuses, however it is reached, indices without that indexer and keys that are not the rank's tokens.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import ProcessGroup
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import (
    AttentionMaskInterface,
    and_masks,
    causal_mask_function,
    eager_mask,
    packed_sequence_mask_function,
    sdpa_mask,
)

from modelgraft.models.attention import FUSED_ATTENTION, fused_attention, sparse_mask
from modelgraft.models.distributed.collectives import all_gather, all_to_all
from modelgraft.models.distributed.guard import fail_together
from modelgraft.models.distributed.mesh import ParallelConfigError, ParallelState
from modelgraft.models.ops.slots import SLOTS

__all__ = [
    "DOCUMENT_IDS",
    "ULYSSES_IMPLEMENTATIONS",
    "attach_ulysses",
    "heads_to_sequence",
    "kv_head_repeats",
    "register_ulysses",
    "sequence_to_heads",
    "ulysses_implementation",
]

#: Implementation name -> the wrapped implementation.
ULYSSES_IMPLEMENTATIONS = {
    "ulysses_sdpa": "sdpa",
    "ulysses_eager": "eager",
    "ulysses_fused_attention": FUSED_ATTENTION,
}


#: The model keyword that carries the document ids of packed rows, for the whole sequence (``shard_sequence``).
DOCUMENT_IDS = "packed_document_ids"

#: (state, document ids ``[B, S]`` or None) of each attached model's call running now, innermost last.
_CALLS: list[tuple[ParallelState, torch.Tensor | None]] = []


def _documents_of(state: ParallelState) -> torch.Tensor | None:
    """The document ids of the running call of a model attached to ``state`` (None: one document per row)."""
    return _CALLS[-1][1] if _CALLS and _CALLS[-1][0] is state else None


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


def kv_head_repeats(kv_heads: int, query_heads: int, sp: int) -> int:
    """How many times each key/value head is repeated before the exchange: the fewest that make the k/v
    heads divide by ``sp`` (``lcm(kv_heads, sp) / kv_heads``; 1 when they already do).

    Repeating head ``j`` in place (heads ``j*r .. j*r + r-1``) keeps grouped-query attention's pairing:
    query head ``q`` reads repeated head ``q // (G / r)``, a copy of head ``q // G`` (``G`` the original
    group size), so each rank gets ``query_heads / sp`` queries and the k/v heads they read.
    """
    if kv_heads % sp == 0:
        return 1
    multiple = math.lcm(kv_heads, sp)
    if query_heads % multiple:
        raise ParallelConfigError(
            f"Ulysses cannot split {kv_heads} key/value heads for {query_heads} query heads over sp={sp}: the query "
            f"heads must divide by lcm(kv heads, sp) = {multiple}"
        )
    return multiple // kv_heads


class _RankView:
    """The attention module as the wrapped implementation sees it on one rank: the query-to-key grouping
    after k/v heads were repeated (when they were), and per-head sinks cut to the rank's heads."""

    def __init__(self, module: nn.Module, *, groups: int | None, sinks: torch.Tensor | None) -> None:
        self._module = module
        if groups is not None:
            self.num_key_value_groups = groups
        if sinks is not None:
            self.sinks = sinks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _rank_heads(x: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
    """The rank's contiguous share of a per-head tensor ``[heads]`` (``sequence_to_heads``'s head order)."""
    share = x.shape[0] // dist.get_world_size(group)
    rank = dist.get_rank(group)
    return x[rank * share : (rank + 1) * share]


def _sp_indexer_bound() -> bool:
    """Whether the DSA indexer runs over the whole sequence (``sp_gather``, bound by ``parallel_ops``)."""
    return SLOTS["dsa_indexer"].bound_kernel_name == "sp_gather"


def _refuse_indexer(config: Any) -> None:
    """Refuse, when the mask is built (before anything runs wrong or fails on a shape), what a head exchange
    cannot make right: compressed keys appended inside attention (DeepSeek-V4's CSA/HCA layers), and a DSA
    indexer (a config with ``index_topk``) that would score only the rank's slice of the keys."""
    name = getattr(config, "model_type", "this model")
    layer_types = getattr(config, "layer_types", None) or ()
    if any("compressed" in str(layer_type) for layer_type in layer_types):
        raise NotImplementedError(
            f"Ulysses attention does not support {name}: its compressed-attention layers append compressed "
            "entries of the rank's own slice to the keys"
        )
    if getattr(config, "index_topk", None) is not None and not _sp_indexer_bound():
        raise NotImplementedError(
            f"Ulysses attention needs the sequence-parallel DSA indexer for {name} (config.index_topk): bind "
            "modelgraft.models.distributed.parallel_ops(state), which binds 'sp_gather' to the dsa_indexer slot"
        )


def _refuse_unexchangeable(query: torch.Tensor, key: torch.Tensor, kwargs: dict[str, Any]) -> None:
    if kwargs.get("indices") is not None and not _sp_indexer_bound():
        raise NotImplementedError(
            "Ulysses attention got sparse `indices` (a DSA indexer's top-k, e.g. GLM-MoE-DSA) picked from this "
            "rank's slice only: bind models.distributed.parallel_ops(state) (its 'sp_gather' indexer)"
        )
    if key.shape[2] != query.shape[2]:
        raise NotImplementedError(
            f"Ulysses attention got {key.shape[2]} keys for {query.shape[2]} queries: keys beyond the rank's "
            "tokens (e.g. DeepSeek-V4's compressed entries) or a KV cache are not supported"
        )


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


#: Wrapped implementations other than the model's own eager one.
_INNER: dict[str, Callable[..., Any]] = {"sdpa": sdpa_attention_forward, FUSED_ATTENTION: fused_attention}


def _attention(wrapped: str, group: ProcessGroup) -> Callable[..., Any]:
    def ulysses_attention(
        module: nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        _refuse_unexchangeable(query, key, kwargs)
        if kwargs.pop(DOCUMENT_IDS, None) is not None:
            raise NotImplementedError(
                f"Ulysses attention got {DOCUMENT_IDS} (packed documents) that its mask never saw: attach the model "
                "with modelgraft.models.distributed.ulysses.attach_ulysses (or scope.attach_parallel), whose hook "
                "hands them to the mask builder"
            )
        # Every query's selection, once heads are exchanged: [B, S/sp, topk] -> [B, S, topk].
        indices = kwargs.pop("indices", None)
        indices = None if indices is None else all_gather(indices, 1, group)
        inner = _INNER.get(wrapped) or _eager_of(module)
        sp = dist.get_world_size(group)
        repeats = kv_head_repeats(key.shape[1], query.shape[1], sp)
        groups = None
        if repeats > 1:
            key, value = repeat_kv(key, repeats), repeat_kv(value, repeats)
            groups = query.shape[1] // key.shape[1]
        sinks = getattr(module, "sinks", None)
        if sinks is not None:
            sinks = _rank_heads(sinks, group)
        if kwargs.get("s_aux") is not None:
            kwargs["s_aux"] = _rank_heads(kwargs["s_aux"], group)
        target: Any = _RankView(module, groups=groups, sinks=sinks) if groups or sinks is not None else module
        query, key, value = (sequence_to_heads(t, group) for t in (query, key, value))
        if indices is not None:  # fused_attention applies them; the others get the mask upstream's eager path builds
            if wrapped == FUSED_ATTENTION:
                kwargs["indices"] = indices
            else:
                attention_mask = sparse_mask(attention_mask, indices, query, key)
        output, _ = inner(target, query, key, value, attention_mask, **kwargs)
        return heads_to_sequence(output, group), None

    ulysses_attention.__name__ = f"ulysses_{wrapped}".removesuffix("_attention") + "_attention"
    return ulysses_attention


def _padding_beyond_common_end(mask: torch.Tensor) -> bool:
    """Whether a boolean ``[B, S]`` mask pads anything but the last positions of every row together (what
    ``shard_sequence`` adds to reach a multiple of ``sp``): such an end is hidden by causality from every
    real query, anything else (left padding, rows padded to different lengths) needs the mask."""
    real_columns = mask.any(dim=0).nonzero()
    if real_columns.numel() == 0:
        return False
    return not bool(mask[:, : int(real_columns[-1]) + 1].all())


def _mask(wrapped: str, state: ParallelState) -> Callable[..., Any]:
    inner = sdpa_mask if wrapped == "sdpa" else eager_mask  # fused_attention builds eager's masks too
    group = state.sp_group

    def ulysses_mask(
        batch_size: int,
        q_length: int,
        kv_length: int,
        q_offset: int = 0,
        kv_offset: int = 0,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> torch.Tensor | None:
        # Checks of what every rank shares (the config, the lengths): they fail on every rank alike.
        _refuse_indexer(kwargs.get("config"))
        if q_offset or kv_offset or kv_length != q_length:
            raise NotImplementedError("Ulysses attention supports forwards without a KV cache only (use_cache=False)")
        sp = dist.get_world_size(group)
        if sp == 1:
            return inner(
                batch_size=batch_size, q_length=q_length, kv_length=kv_length, attention_mask=attention_mask, **kwargs
            )
        if attention_mask is None:
            raise ValueError(
                f"Ulysses attention (sp={sp}) needs the 2-D attention mask of the rank's slice, as shard_sequence "
                "returns it: without one, transformers reads position ids that restart in the slice as packed "
                "documents, which a slice of the sequence cannot describe"
            )
        local = attention_mask.to(torch.uint8).contiguous()
        pieces = [torch.empty_like(local) for _ in range(sp)]
        dist.all_gather(pieces, local, group=group)
        # What follows reads this rank's data: a failure here stops every rank before attention's exchanges.
        with fail_together(state.data_group, "Ulysses attention mask"):
            whole = torch.cat(pieces, dim=-1).bool()
            # Padding at the end of every row (sp's) is hidden from every real query by causality: no padding mask.
            padding = whole if _padding_beyond_common_end(whole) else None
            documents = _documents_of(state)
            if documents is not None:  # what one process adds for packed rows, from the whole sequence's ids
                if tuple(documents.shape) != (batch_size, q_length * sp):
                    raise ValueError(
                        f"{DOCUMENT_IDS} of shape {tuple(documents.shape)}: expected the whole sequence's, "
                        f"{(batch_size, q_length * sp)}"
                    )
                mask_function = kwargs.get("mask_function", causal_mask_function)
                kwargs["mask_function"] = and_masks(mask_function, packed_sequence_mask_function(documents))
                kwargs["allow_is_causal_skip"] = False
            return inner(
                batch_size=batch_size,
                q_length=q_length * sp,
                kv_length=kv_length * sp,
                attention_mask=padding,
                **kwargs,
            )

    return ulysses_mask


def _register(names: dict[str, str], state: ParallelState) -> None:
    for name, wrapped in names.items():
        AttentionInterface.register(name, _attention(wrapped, state.sp_group))
        AttentionMaskInterface.register(name, _mask(wrapped, state))


def register_ulysses(state: ParallelState) -> tuple[str, ...]:
    """Register ``"ulysses_sdpa"``, ``"ulysses_eager"`` and ``"ulysses_fused_attention"`` over ``state``'s sp
    group; returns the names.

    Build the model with ``attn_implementation="ulysses_sdpa"`` (or set ``config._attn_implementation``)
    after this call. Registration is process-wide; registering again rebinds the names to the new state,
    for every model that uses them. For a state of one model only, use :func:`attach_ulysses`.
    """
    _register(ULYSSES_IMPLEMENTATIONS, state)
    return tuple(ULYSSES_IMPLEMENTATIONS)


#: id(state) -> (the state, kept alive while its names are registered; the number in its names).
_SCOPED: dict[int, tuple[ParallelState, int]] = {}


def ulysses_implementation(state: ParallelState, wrapped: str) -> str:
    """The name of an implementation of Ulysses attention over ``state``'s sp group only, wrapping ``wrapped``
    (``"sdpa"``, ``"eager"`` or ``"fused_attention"``): ``"ulysses_sdpa@1"`` for the first state, and so
    on. Registered once per state; no other state or registration rebinds it."""
    base = f"ulysses_{wrapped}"
    if base not in ULYSSES_IMPLEMENTATIONS:
        raise ParallelConfigError(f"Ulysses wraps one of {sorted(ULYSSES_IMPLEMENTATIONS.values())}, not {wrapped!r}")
    entry = _SCOPED.get(id(state))
    if entry is None or entry[0] is not state:
        entry = (state, len(_SCOPED) + 1)
        _SCOPED[id(state)] = entry
        _register({f"{name}@{entry[1]}": inner for name, inner in ULYSSES_IMPLEMENTATIONS.items()}, state)
    return f"{base}@{entry[1]}"


def _wrapped_of(implementation: str) -> str:
    """``"sdpa"`` for ``"sdpa"``, ``"ulysses_sdpa"`` and ``"ulysses_sdpa@2"``; likewise for the others."""
    base = implementation.split("@", 1)[0]
    return ULYSSES_IMPLEMENTATIONS.get(base, base)


def attach_ulysses(model: nn.Module, state: ParallelState) -> str:
    """Make ``model``'s attention run over ``state``'s sp group, whatever else is registered; returns the
    implementation name the model now uses.

    The model's config (and its sub-configs) names an implementation registered for ``state`` alone
    (:func:`ulysses_implementation`), wrapping the one it had (``sdpa``, ``eager`` or ``fused_attention``,
    also when given as ``ulysses_sdpa``...). With ``sp == 1`` the plain implementation is kept: attention
    needs no exchange. Another model in the process keeps its own implementation and state.
    """
    wrapped = _wrapped_of(model.config._attn_implementation)
    if state.sp == 1 and wrapped not in ULYSSES_IMPLEMENTATIONS.values():
        return model.config._attn_implementation  # nothing to exchange: any implementation runs as it is
    if wrapped not in ULYSSES_IMPLEMENTATIONS.values():
        raise ParallelConfigError(
            f"Ulysses wraps one of {sorted(ULYSSES_IMPLEMENTATIONS.values())}; {type(model).__name__} uses "
            f"{model.config._attn_implementation!r}"
        )
    name = wrapped if state.sp == 1 else ulysses_implementation(state, wrapped)
    # A multimodal model's towers (vision, audio) attend within each image or clip, which every sp rank holds
    # whole: only the text decoder (text_config) exchanges heads, the towers keep their implementation.
    sub_configs = getattr(model.config, "sub_configs", None) or {}
    model.set_attn_implementation({"": name, "text_config": name} if "text_config" in sub_configs else name)
    _take_documents(model, state)
    return name


def _take_documents(model: nn.Module, state: ParallelState) -> None:
    """Hook ``model``'s calls: each takes ``packed_document_ids`` out of its keywords (the model's own forward
    never sees them) and holds them, with ``state``, for the mask builder while the call runs."""

    def enter(module: nn.Module, args: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        _CALLS.append((state, kwargs.pop(DOCUMENT_IDS, None)))
        return args, kwargs

    def leave(module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        if _CALLS and _CALLS[-1][0] is state:  # not pushed when an earlier pre-hook of the call raised
            _CALLS.pop()

    for handle in getattr(model, "_ulysses_document_hooks", ()):  # attached again: the new state's hooks replace
        handle.remove()
    model._ulysses_document_hooks = ()
    if state.sp > 1:  # with sp == 1 nothing is sliced: transformers reads documents from the whole position ids
        model._ulysses_document_hooks = (
            model.register_forward_pre_hook(enter, with_kwargs=True, prepend=True),
            model.register_forward_hook(leave, with_kwargs=True, always_call=True),
        )
