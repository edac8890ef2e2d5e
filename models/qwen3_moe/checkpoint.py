"""Qwen3-MoE checkpoints: per-expert hub weights -> the fused experts of the generated modeling.

Hub checkpoints (Qwen/Qwen3-30B-A3B, ...) store ``model.layers.<n>.mlp.experts.<e>.{gate,up,down}_proj.weight``
(``[I, H]``, ``[I, H]``, ``[H, I]``, I = ``moe_intermediate_size``); transformers 5.16 fuses them on load
with the "qwen2_moe" conversion (``conversion_mapping.py`` maps qwen3_moe to it). Registered for
model_type "qwen3_moe" in ``models/qwen3_moe/__init__.py``; ``models.checkpoint.load_checkpoint`` uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from models.converters.moe import FusedExpertsConverter

if TYPE_CHECKING:
    from transformers import Qwen3MoeConfig


def checkpoint_converter(config: Qwen3MoeConfig) -> FusedExpertsConverter:
    """A fresh converter for one checkpoint of a model built from ``config``."""
    return FusedExpertsConverter(
        num_experts=config.num_experts,
        hidden_size=config.hidden_size,
        intermediate_size=config.moe_intermediate_size,
    )
