"""Qwen3.5-MoE checkpoints: per-expert hub weights -> the fused experts of the generated modeling.

The hub checkpoints store each expert's projections separately (``experts.<e>.{gate,up,down}_proj.weight``);
transformers 5.16 fuses them on load with the "qwen2_moe" entry of ``conversion_mapping.py`` (added to
"qwen3_5_moe_text"). The generated modeling holds them as upstream's does, ``gate_up_proj [E, 2I, H]`` and
``down_proj [E, H, I]`` (H = ``text_config.hidden_size``, I = ``text_config.moe_intermediate_size``).
Registered for model_type "qwen3_5_moe" in ``models/qwen3_5_moe/__init__.py``; ``load_checkpoint`` uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelgraft.models.converters.moe import FusedExpertsConverter

if TYPE_CHECKING:
    from transformers import Qwen3_5MoeConfig


def checkpoint_converter(config: Qwen3_5MoeConfig) -> FusedExpertsConverter:
    """A fresh converter for one checkpoint of a model built from ``config`` (the text decoder's expert sizes)."""
    text = config.get_text_config()
    return FusedExpertsConverter(
        num_experts=text.num_experts,
        hidden_size=text.hidden_size,
        intermediate_size=text.moe_intermediate_size,
    )
