"""DeepSeek-V3 checkpoints: the hub layout (deepseek-ai/DeepSeek-V3) <-> the fused experts of the generated modeling.

The hub checkpoints keep the modeling's key names but store each routed expert's projections separately,
``model.layers.<l>.mlp.experts.<e>.{gate_proj,up_proj,down_proj}.weight``, while the modeling holds them
fused, ``gate_up_proj [E, 2I, H]`` and ``down_proj [E, H, I]`` (E = ``n_routed_experts``, I =
``moe_intermediate_size``); the pinned transformers fuses them on load with the "qwen2_moe" entry of
``conversion_mapping.py``. They also hold the multi-token-prediction layer (``model.layers.61.*``, dropped,
as upstream ignores it) and, as released, FP8 weights with ``weight_scale_inv`` scales (refused).
The dense first layers (``first_k_dense_replace``) and the shared experts load as they are. The conversion
is :class:`~models.converters.deepseek.DeepseekCheckpointConverter`, shared by every model of this layout.

Registered for model_type "deepseek_v3" in ``models/deepseek_v3/__init__.py``; ``load_checkpoint`` uses it.
:func:`hub_state_dict` is the reverse, for exporting a checkpoint that upstream's ``from_pretrained`` loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from modelgraft.models.converters.deepseek import DeepseekCheckpointConverter, per_expert_state_dict
from modelgraft.models.converters.moe import FusedExpertsConverter

if TYPE_CHECKING:
    import torch
    from transformers import DeepseekV3Config

__all__ = ["checkpoint_converter", "hub_state_dict"]


def checkpoint_converter(config: DeepseekV3Config) -> DeepseekCheckpointConverter:
    """A fresh converter for one checkpoint of a model built from ``config``."""
    return DeepseekCheckpointConverter(
        FusedExpertsConverter(
            num_experts=config.num_local_experts,
            hidden_size=config.hidden_size,
            intermediate_size=config.moe_intermediate_size,
        ),
        num_hidden_layers=config.num_hidden_layers,
        mtp_layers=config.num_mtp_layers,
        model="DeepSeek-V3",
    )


def hub_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` of the generated modeling in the hub's layout (one linear per routed expert)."""
    return per_expert_state_dict(state_dict)
