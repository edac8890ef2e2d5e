"""Deterministic tiny batches that exercise padding and ignored labels."""

from __future__ import annotations

import torch
from transformers import PreTrainedConfig

IGNORE_INDEX = -100


def _padded_ids(
    config: PreTrainedConfig, batch_size: int, seq_len: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids (never the pad id) with the last row right-padded by a third of its length."""
    text_config = config.get_text_config()
    pad_id = text_config.pad_token_id if text_config.pad_token_id is not None else 0
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, text_config.vocab_size, (batch_size, seq_len), generator=generator)
    input_ids[input_ids == pad_id] = (pad_id + 1) % text_config.vocab_size
    attention_mask = torch.ones_like(input_ids)
    attention_mask[-1, seq_len - seq_len // 3 :] = 0
    input_ids[attention_mask == 0] = pad_id
    return input_ids, attention_mask


def causal_lm_batch(
    config: PreTrainedConfig, *, batch_size: int = 4, seq_len: int = 11, seed: int = 0
) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask / labels; labels ignore padding and the first row's two-token prompt."""
    input_ids, attention_mask = _padded_ids(config, batch_size, seq_len, seed)
    labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
    labels[0, :2] = IGNORE_INDEX
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def sequence_classification_batch(
    config: PreTrainedConfig, *, batch_size: int = 4, seq_len: int = 11, seed: int = 0
) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask / one class label per row (``config.num_labels`` classes)."""
    input_ids, attention_mask = _padded_ids(config, batch_size, seq_len, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    labels = torch.randint(0, config.num_labels, (batch_size,), generator=generator)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
