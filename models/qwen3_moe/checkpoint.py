"""Qwen3-MoE checkpoints: per-expert hub weights -> the fused experts of the generated modeling.

Hub checkpoints (Qwen/Qwen3-30B-A3B, ...) store each expert's projections separately:
``experts.<e>.{gate_proj,up_proj,down_proj}.weight``. The generated modeling holds them fused,
``gate_up_proj [E, 2I, H]`` and ``down_proj [E, H, I]`` (I = ``moe_intermediate_size``).
The pinned transformers fuses them on load with the "qwen2_moe" entry of ``conversion_mapping.py``.
Registered for model_type "qwen3_moe" in ``models/qwen3_moe/__init__.py``; ``load_checkpoint`` uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelgraft.models.converters.moe import FusedExpertsConverter

if TYPE_CHECKING:
    from transformers import Qwen3MoeConfig


def checkpoint_converter(config: Qwen3MoeConfig) -> FusedExpertsConverter:
    """A fresh converter for one checkpoint of a model built from ``config``."""
    return FusedExpertsConverter(
        num_experts=config.num_experts,
        hidden_size=config.hidden_size,
        intermediate_size=config.moe_intermediate_size,
    )
