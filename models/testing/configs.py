"""Tiny model configs whose sizes are pairwise distinct, so a transposed or mis-sliced weight cannot pass."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, TypeVar

from transformers import PreTrainedConfig

_C = TypeVar("_C", bound=PreTrainedConfig)

#: No two of these (nor the products that become weight shapes: q_proj 6*16=96, k/v_proj 2*16=32) coincide.
TINY_SIZES: MappingProxyType[str, Any] = MappingProxyType(
    {
        "hidden_size": 48,
        "intermediate_size": 80,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 131,
        "num_hidden_layers": 3,
        "max_position_embeddings": 64,
        "num_labels": 5,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
)


def tiny_config(config_cls: type[_C], **sizes: Any) -> _C:
    """``config_cls`` at ``TINY_SIZES`` (overridden or extended by ``sizes``), eager attention, no dropout.

    Composite (VLM) configs take their sub-configs through ``sizes``, e.g. ``text_config={...}``.
    """
    return config_cls(**{**TINY_SIZES, "attention_dropout": 0.0, "attn_implementation": "eager", **sizes})
