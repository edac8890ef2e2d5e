"""Materialize a model built on the meta device, after sharding it, so each rank allocates only its shards.

A model too big for one rank is built without memory (``build_model(config, device="meta")``), sharded
while still on meta (``apply_expert_parallel`` keeps this rank's experts, ``apply_fsdp`` turns the dense
parameters into DTensors of this rank's rows), and only then given storage: :func:`materialize` calls
torch's ``nn.Module.to_empty``, which allocates every parameter at its *local* shape (FSDP2's ``_apply``
re-registers the sharded DTensors), and then fills it with transformers' own initialization
(``PreTrainedModel.initialize_weights``, which dispatches the model's ``_init_weights`` module by module).

Why ``initialize_weights`` even when a checkpoint is loaded afterwards: the buffers upstream computes in
``__init__`` (RoPE's ``inv_freq`` and ``original_inv_freq``, non-persistent, so in no checkpoint) are meta
too, and ``to_empty`` leaves them as uninitialized memory. transformers' ``from_pretrained`` recomputes
them the same way, through ``_init_weights``. With ``weights=False`` every parameter and persistent buffer
is flagged ``_is_hf_initialized`` first, so transformers' guarded init functions skip them and only the
buffers no checkpoint holds are computed; the checkpoint then fills the rest.

Safety net: before initializing, :func:`materialize` fills every non-persistent buffer with a sentinel
(NaN, or the dtype's minimum for integers) and refuses, naming them, any buffer the model's
``_init_weights`` left untouched: a model whose init does not recompute one of its buffers fails here
instead of running with garbage.

``to_empty`` runs with ``torch.__future__.set_swap_module_params_on_conversion(True)``, so that each
parameter keeps its identity (``torch.utils.swap_tensors``) and tied weights (``lm_head.weight`` is
``embed_tokens.weight``) stay tied; plain ``to_empty`` replaces each module's parameter by a new one and
unties them.

What equality holds after random initialization: deterministic entries (norm weights, zero biases, the
recomputed buffers) equal those of a model built whole. Random parameters follow the model's init
distribution but are drawn per local shard (on CPU, DTensor has no sharding-invariant RNG), so they differ
from a whole-model build with the same seed; load a checkpoint for equal weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["UninitializedBufferError", "local_parameter_bytes", "materialize", "non_persistent_buffers"]


class UninitializedBufferError(RuntimeError):
    """A buffer the model's ``_init_weights`` does not recompute after materialization (named in the message)."""


def non_persistent_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every buffer that is not in the state dict (so in no checkpoint): name -> tensor."""
    found = {}
    for module_name, module in model.named_modules():
        for name, buffer in module.named_buffers(recurse=False):
            if buffer is not None and name in module._non_persistent_buffers_set:
                found[f"{module_name}.{name}" if module_name else name] = buffer
    return found


def local_parameter_bytes(model: nn.Module) -> int:
    """Bytes of parameter storage this rank holds: the sum of local shard numels times element size.

    A DTensor counts its local tensor (FSDP's rows of this rank), an expert-parallel parameter its chunk;
    tied parameters count once.
    """
    seen: set[int] = set()
    total = 0
    for param in model.parameters():
        if id(param) in seen:
            continue
        seen.add(id(param))
        local = param.to_local() if hasattr(param, "to_local") else param
        total += local.numel() * local.element_size()
    return total


@contextmanager
def _swapping_params() -> Iterator[None]:
    """``nn.Module._apply`` swaps tensors in place (``swap_tensors``), keeping each parameter's identity."""
    previous = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        yield
    finally:
        torch.__future__.set_swap_module_params_on_conversion(previous)


def _sentinel(buffer: torch.Tensor) -> float | int | bool:
    if buffer.dtype.is_floating_point or buffer.dtype.is_complex:
        return float("nan")
    if buffer.dtype == torch.bool:
        return False
    return torch.iinfo(buffer.dtype).min


def _still_sentinel(buffer: torch.Tensor) -> bool:
    if buffer.numel() == 0 or buffer.dtype == torch.bool:
        return False
    if buffer.dtype.is_floating_point or buffer.dtype.is_complex:
        return bool(torch.isnan(buffer).all())
    return bool((buffer == torch.iinfo(buffer.dtype).min).all())


def _flag_states(model: nn.Module, value: bool) -> list[torch.Tensor]:
    """Set (or clear) transformers' ``_is_hf_initialized`` on every parameter and persistent buffer."""
    flagged = []
    persistent = {id(t) for t in model.state_dict(keep_vars=True).values()}
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) in persistent:
            if value:
                tensor._is_hf_initialized = True
            elif hasattr(tensor, "_is_hf_initialized"):
                del tensor._is_hf_initialized
            flagged.append(tensor)
    return flagged


def _clear_module_flags(model: nn.Module) -> None:
    """``_initialize_weights`` skips a module flagged initialized: a fresh materialization must visit all."""
    for module in model.modules():
        if "_is_hf_initialized" in module.__dict__:
            del module._is_hf_initialized


def materialize(model: nn.Module, device: str | torch.device = "cpu", *, weights: bool = True) -> nn.Module:
    """Give a meta-device model (already sharded, or not) storage on ``device`` and initialize it; returns it.

    Each rank allocates only its local shards: call it after ``apply_expert_parallel`` and ``apply_fsdp``.
    ``weights=True`` runs the model's own ``_init_weights`` on everything (through transformers'
    ``initialize_weights``); ``weights=False`` computes only what no checkpoint holds (non-persistent
    buffers such as RoPE's ``inv_freq``), for a model a checkpoint is loaded into next, and leaves the
    parameters as ``to_empty`` left them (uninitialized). Raises :class:`UninitializedBufferError` naming
    every non-persistent buffer the model's init left uncomputed. Call it on every rank: on CPU it runs no
    collective, but on an accelerator DTensor's random ops may synchronize their generator across ranks.
    """
    with _swapping_params():
        model.to_empty(device=device)
    buffers = non_persistent_buffers(model)
    with torch.no_grad():
        for buffer in buffers.values():
            buffer.fill_(_sentinel(buffer))
    initialize = getattr(model, "initialize_weights", None)
    if initialize is None:
        raise TypeError(f"{type(model).__name__} has no initialize_weights: materialize needs a transformers model")
    _clear_module_flags(model)
    if weights:
        _flag_states(model, False)
        initialize()
    else:
        flagged = _flag_states(model, True)
        try:
            initialize()
        finally:
            for tensor in flagged:
                if hasattr(tensor, "_is_hf_initialized"):
                    del tensor._is_hf_initialized
    _clear_module_flags(model)
    stale = sorted(name for name, buffer in buffers.items() if _still_sentinel(buffer))
    if stale:
        raise UninitializedBufferError(
            f"{type(model).__name__}'s _init_weights does not recompute the buffer(s) {', '.join(stale)} after "
            "materialization; they would hold uninitialized memory (build this model off the meta device)"
        )
    return model
