"""Qwen3-VL-MoE checkpoints: the hub's transposed fused experts, or per-expert weights -> the generated modeling.

The generated modeling holds each sparse layer's experts as upstream's modeling does, ``gate_up_proj [E, 2I, H]``
and ``down_proj [E, H, I]`` (H = ``text_config.hidden_size``, I = ``text_config.moe_intermediate_size``). The hub
checkpoints of this model (Qwen/Qwen3-VL-30B-A3B-*) store them fused under the same names but the other way round,
``[E, H, 2I]`` and ``[E, I, H]``: transformers 5.16 transposes them on load (``conversion_mapping.py``,
"qwen3_vl_moe": ``Transpose(1, 2, check_dims=True)`` on ``mlp.experts.gate_up_proj`` and ``mlp.experts.down_proj``)
and back on save. A checkpoint written from the model's own ``state_dict`` holds the modeling's layout, and
per-expert exports hold ``nn.Linear`` weights (``experts.<e>.{gate,up,down}_proj.weight``).

Which layout a checkpoint has is decided from the config's sizes and the checkpoint's tensors
(:class:`modelgraft.models.converters.layout.LayoutEvidence`), never from a shape that reads the same both ways:
``H == 2I`` ties ``gate_up_proj`` and ``H == I`` ties ``down_proj``, and the two cannot hold together, so a
layer's other projection shows the layout and a tied tensor waits for it.
Registered for model_type "qwen3_vl_moe" in ``models/qwen3_vl_moe/__init__.py``; ``load_checkpoint`` uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelgraft.models.converters.moe import FusedExpertsConverter

if TYPE_CHECKING:
    from transformers import Qwen3VLMoeConfig


def checkpoint_converter(config: Qwen3VLMoeConfig) -> FusedExpertsConverter:
    """A fresh converter for one checkpoint of a model built from ``config`` (the text decoder's expert sizes)."""
    text = config.get_text_config()
    return FusedExpertsConverter(
        num_experts=text.num_experts,
        hidden_size=text.hidden_size,
        intermediate_size=text.moe_intermediate_size,
        export_layout="transposed",  # the hub's layout, which upstream's from_pretrained transposes on load
    )
