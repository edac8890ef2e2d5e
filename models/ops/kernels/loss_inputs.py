"""Label shifting, flattening and reduction shared by every causal-LM loss kernel, so they agree by construction."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def shift_causal_labels(labels: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """Targets for next-token prediction: labels moved left by one, the last position ignored."""
    return F.pad(labels, (0, 1), value=ignore_index)[..., 1:].contiguous()


def divide_by_num_items(summed: torch.Tensor, num_items_in_batch: Any) -> torch.Tensor:
    """Summed token losses over the trainer's item count (int or tensor, on any device)."""
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(summed.device)
    return summed / num_items_in_batch


def flat_rows_and_targets(
    hidden_states: torch.Tensor,
    lm_head_weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    vocab_size: int,
    ignore_index: int,
    shift_labels: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[rows, hidden]`` states and their ``[rows]`` targets for kernels that fuse lm_head into the loss."""
    if lm_head_weight.shape[0] != vocab_size:
        raise ValueError(f"lm_head_weight has {lm_head_weight.shape[0]} rows but vocab_size is {vocab_size}")
    if shift_labels is None:
        shift_labels = shift_causal_labels(labels, ignore_index)
    rows = hidden_states.reshape(-1, hidden_states.shape[-1])
    targets = shift_labels.reshape(-1).to(rows.device)
    if targets.shape[0] != rows.shape[0]:
        raise ValueError(
            f"{rows.shape[0]} hidden-state rows but {targets.shape[0]} targets: hidden states and labels "
            "must cover the same positions"
        )
    return rows, targets
