"""MistralLarge4 checkpoints: per-expert hub weights -> the fused experts of the generated modeling.

Hub checkpoints store each expert's projections separately:
``experts.<e>.{gate_proj,up_proj,down_proj}.weight``. The generated modeling holds them fused,
``gate_up_proj [E, 2I, H]`` and ``down_proj [E, H, I]`` (I = ``text_config.moe_intermediate_size``).
Registered for model_type "mistral_large4" in ``models/mistral_large4/__init__.py``; ``load_checkpoint`` uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelgraft.models.converters.moe import FusedExpertsConverter

if TYPE_CHECKING:
    from transformers import MistralLarge4Config


def checkpoint_converter(config: MistralLarge4Config) -> FusedExpertsConverter:
    """A fresh converter for one checkpoint of a model built from ``config`` (the text decoder's expert sizes)."""
    text = config.get_text_config()
    return FusedExpertsConverter(
        num_experts=text.num_local_experts,
        hidden_size=text.hidden_size,
        intermediate_size=text.moe_intermediate_size,
    )
