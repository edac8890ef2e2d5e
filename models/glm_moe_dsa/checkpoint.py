"""GLM-MoE-DSA checkpoints: the hub layout (zai-org/GLM-5) <-> the fused experts of the generated modeling.

GLM-5's hub checkpoints have DeepSeek-V3's layout (``modelgraft.models.converters.deepseek``): the modeling's key names,
one ``gate_proj``/``up_proj``/``down_proj`` per routed expert, which the pinned transformers fuses on load with the
"qwen2_moe" entry of ``conversion_mapping.py`` into ``gate_up_proj [E, 2I, H]`` and ``down_proj [E, H, I]``
(E = ``n_routed_experts``, I = ``moe_intermediate_size``), and the multi-token-prediction layer stored as
one more decoder layer (``model.layers.78.*`` of GLM-5, which upstream ignores). The dense first layers, the
shared experts, the router and the DSA indexer (``self_attn.indexer.*``) load under their own names.

GlmMoeDsaConfig has no field for the number of MTP layers; GLM's hub config says it as
``num_nextn_predict_layers`` (kept on the config as an extra attribute), and GLM-5 has one, the default here.

Registered for model_type "glm_moe_dsa" in ``models/glm_moe_dsa/__init__.py``; ``load_checkpoint`` uses it.
:func:`hub_state_dict` is the reverse, for exporting a checkpoint that upstream's ``from_pretrained`` loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from modelgraft.models.converters.deepseek import DeepseekCheckpointConverter, per_expert_state_dict
from modelgraft.models.converters.moe import FusedExpertsConverter

if TYPE_CHECKING:
    import torch
    from transformers import GlmMoeDsaConfig

__all__ = ["checkpoint_converter", "hub_state_dict"]


def checkpoint_converter(config: GlmMoeDsaConfig) -> DeepseekCheckpointConverter:
    """A fresh converter for one checkpoint of a model built from ``config``."""
    return DeepseekCheckpointConverter(
        FusedExpertsConverter(
            num_experts=config.num_local_experts,
            hidden_size=config.hidden_size,
            intermediate_size=config.moe_intermediate_size,
        ),
        num_hidden_layers=config.num_hidden_layers,
        mtp_layers=getattr(config, "num_nextn_predict_layers", 1),
        model="GLM-MoE-DSA",
    )


def hub_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` of the generated modeling in the hub's layout (one linear per routed expert)."""
    return per_expert_state_dict(state_dict)
