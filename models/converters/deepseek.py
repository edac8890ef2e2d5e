"""Checkpoints in DeepSeek-V3's hub layout <-> the fused experts of transformers 5.x modeling.

DeepSeek-V3 (deepseek-ai/DeepSeek-V3) and the models built on its layout (GLM-MoE-DSA's zai-org/GLM-5, ...)
publish checkpoints that already use the modeling's key names, with three differences:

- each routed expert is its own set of linears, ``model.layers.<l>.mlp.experts.<e>.{gate,up,down}_proj.weight``,
  which the modeling holds fused (``experts.gate_up_proj [E, 2I, H]``, ``experts.down_proj [E, H, I]``);
  :class:`~models.converters.moe.FusedExpertsConverter` fuses them as transformers' "qwen2_moe" entry of
  ``conversion_mapping.py`` does;
- the multi-token-prediction (MTP) module is stored as extra decoder layers after the last one
  (``model.layers.61.*`` of DeepSeek-V3), for which the modeling has no module: upstream ignores those keys
  (``_keys_to_ignore_on_load_unexpected``), and this converter drops them, layer and experts alike;
- the released weights are FP8, each quantized weight followed by its ``weight_scale_inv``: loading the
  weights without their scales would give wrong values without a word, so a scale key is refused by name.

Everything else passes through under its own name and unchanged: the dense first layers' MLP
(``mlp.{gate,up,down}_proj``), the shared experts (``mlp.shared_experts.*``, one MLP, not per expert), the
router (``mlp.gate.weight``, ``mlp.gate.e_score_correction_bias``), attention and norms.
:func:`per_expert_state_dict` is the way back, for exporting a checkpoint upstream's ``from_pretrained`` loads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from modelgraft.models.converters.base import ConversionError
from modelgraft.models.converters.moe import FusedExpertsConverter

if TYPE_CHECKING:
    import torch

__all__ = ["DeepseekCheckpointConverter", "per_expert_state_dict"]

_LAYER = re.compile(r"^model\.layers\.(?P<layer>\d+)\.")
#: The companion of each FP8-quantized weight in DeepSeek's releases (the inverse of its block scales).
SCALE_SUFFIX = ".weight_scale_inv"


class DeepseekCheckpointConverter:
    """Drops the MTP layers, refuses FP8 scales, and fuses the routed experts; other keys pass through.

    ``num_hidden_layers`` decoder layers are the modeling's; the ``mtp_layers`` layers right after them are
    the MTP module, dropped before any of their experts is buffered. A key of a layer past those is left
    to the loader, which reports it as not in the model. ``model`` names the model in error messages.
    The experts-range methods delegate to the fusing converter, so expert-parallel loading reads only a
    rank's own experts (``modelgraft.models.distributed.checkpoint``).
    """

    def __init__(self, experts: FusedExpertsConverter, *, num_hidden_layers: int, mtp_layers: int, model: str) -> None:
        self.experts = experts
        self.num_hidden_layers = num_hidden_layers
        self.mtp_layers = mtp_layers
        self.model = model
        self._mtp = range(num_hidden_layers, num_hidden_layers + mtp_layers)

    def for_experts(self, start: int, stop: int) -> DeepseekCheckpointConverter:
        """The same conversion, fusing only experts ``[start, stop)`` of each layer (one rank's share)."""
        return DeepseekCheckpointConverter(
            self.experts.for_experts(start, stop),
            num_hidden_layers=self.num_hidden_layers,
            mtp_layers=self.mtp_layers,
            model=self.model,
        )

    def expert_of(self, key: str) -> int | None:
        return self.experts.expert_of(key)

    def in_mtp_layer(self, key: str) -> bool:
        match = _LAYER.match(key)
        return match is not None and int(match["layer"]) in self._mtp

    def can_handle(self, key: str) -> bool:
        return self.in_mtp_layer(key) or key.endswith(SCALE_SUFFIX) or self.experts.can_handle(key)

    def convert(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        if self.in_mtp_layer(key):
            return []
        if key.endswith(SCALE_SUFFIX):
            raise ConversionError(
                f"{key!r} is the scale of an FP8-quantized {self.model} weight; this loader reads bf16 or fp32 "
                "weights only. Dequantize the checkpoint first (transformers' from_pretrained with "
                "FineGrainedFP8Config(dequantize=True), then save_pretrained) and load that folder"
            )
        return self.experts.convert(key, tensor)

    def finalize(self) -> list[tuple[str, torch.Tensor]]:
        return self.experts.finalize()

    def export(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """The hub layout of one whole modeling entry: the routed experts one linear each, the rest unchanged."""
        return self.experts.export(key, tensor)


def per_expert_state_dict(
    state_dict: Mapping[str, torch.Tensor], projections: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")
) -> dict[str, torch.Tensor]:
    """``state_dict`` of the modeling in the hub's layout: the fused expert tensors split into one linear each.

    ``<m>.experts.gate_up_proj [E, 2I, H]`` becomes ``<m>.experts.<e>.<gate>.weight`` (the first I rows of
    expert e) and ``<m>.experts.<e>.<up>.weight``; ``<m>.experts.down_proj [E, H, I]`` becomes
    ``<m>.experts.<e>.<down>.weight``. Every other key keeps its name; tensors are copied, contiguous.
    """
    gate, up, down = projections
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        module, _, name = key.rpartition(".")
        if module.endswith(".experts") and name == "gate_up_proj":
            for expert, fused in enumerate(tensor):
                gate_rows, up_rows = fused.chunk(2, dim=0)
                out[f"{module}.{expert}.{gate}.weight"] = gate_rows.contiguous().clone()
                out[f"{module}.{expert}.{up}.weight"] = up_rows.contiguous().clone()
        elif module.endswith(".experts") and name == "down_proj":
            for expert, fused in enumerate(tensor):
                out[f"{module}.{expert}.{down}.weight"] = fused.contiguous().clone()
        else:
            out[key] = tensor.contiguous().clone()
    return out
