"""The ``causal_conv1d`` kernel family: Dao-AILab's CUDA causal conv1d (GPU only, imported when bound).

Upstream binds it at import time whenever ``causal_conv1d`` is importable; here it runs only when bound to the
conv slots. Documents of ``cu_seqlens`` (a batch of one) become the package's ``seq_idx``, so each starts from
zeros, as the ``chunked_delta`` CPU kernel does.
"""

from __future__ import annotations

import torch
from causal_conv1d import causal_conv1d_fn as _conv
from causal_conv1d import causal_conv1d_update as _conv_update

__all__ = ["causal_conv1d", "causal_conv1d_update", "sequence_index"]


def sequence_index(cu_seqlens: torch.Tensor, length: int) -> torch.Tensor:
    """int32 [1, length]: each position's document number, from the boundaries ``cu_seqlens``."""
    positions = torch.arange(length, device=cu_seqlens.device)
    return (torch.searchsorted(cu_seqlens[1:].contiguous(), positions, right=True)).to(torch.int32)[None]


def causal_conv1d(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
    *,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """The package's causal conv1d; it takes ``silu``/``swish`` or no activation."""
    seq_idx = None if cu_seqlens is None else sequence_index(cu_seqlens, hidden_states.shape[-1])
    return _conv(hidden_states, weight, bias, seq_idx=seq_idx, activation=activation)


def causal_conv1d_update(
    hidden_states: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
) -> torch.Tensor:
    """The package's in-place decode step."""
    return _conv_update(hidden_states, conv_state, weight, bias, activation)
