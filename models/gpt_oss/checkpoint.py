"""GptOss checkpoints: the bf16 hub layout is the modeling layout; this converter checks it and refuses MXFP4.

The pinned transformers has no ``conversion_mapping.py`` entry for gpt_oss: its unquantized checkpoints store the
experts exactly as ``GptOssExperts`` holds them, per layer ``mlp.experts.gate_up_proj [E, H, 2I]`` (gate
and up in alternating columns), ``gate_up_proj_bias [E, 2I]``, ``down_proj [E, I, H]`` and
``down_proj_bias [E, H]`` (I = ``intermediate_size``). So the expert tensors pass through unchanged; what
the converter adds is a check of each against the config, by layout and not by shape alone (with
``H == 2I`` a transposed tensor has the right shape, but the config says which axis is which), and a
check that every layer's four expert tensors arrived.

The released checkpoints (openai/gpt-oss-20b, openai/gpt-oss-120b) are MXFP4-quantized instead: the two
projections are stored as ``<proj>_blocks`` / ``<proj>_scales`` and transformers dequantizes them through
its quantizer, not through a conversion. This converter does not dequantize; it stops at the first such
key, naming it, and says how to obtain the bf16 layout.

Registered for model_type "gpt_oss" in ``models/gpt_oss/__init__.py``; ``load_checkpoint`` uses it. The
reverse direction is the identity (``export``): ``save_pretrained`` of the generated
class writes this same layout, which upstream ``from_pretrained`` loads.

Expert parallelism: every expert tensor holds the experts on dim 0, so ``for_experts(start, stop)`` is a
converter that checks (and, given whole tensors, keeps) experts ``[start, stop)`` only, and ``expert_of``
is None for every key (no key holds one expert alone). With these hooks the sharded loaders
(``modelgraft.models.distributed.sharded_load``, ``.checkpoint``) read only a rank's experts of each tensor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelgraft.models.converters.base import ConversionError

if TYPE_CHECKING:
    import torch
    from transformers import GptOssConfig

#: The expert tensors of one layer, in the order a message lists them.
EXPERT_TENSORS = ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias")
#: Suffixes of the MXFP4-quantized projections in the released hub checkpoints.
QUANTIZED_SUFFIXES = ("_blocks", "_scales")
_MARKER = ".experts."


class GptOssExpertsConverter:
    """Streamed pass-through of gpt_oss's fused expert tensors, checked against the config's sizes."""

    def __init__(
        self,
        *,
        num_experts: int,
        hidden_size: int,
        intermediate_size: int,
        expert_range: tuple[int, int] | None = None,
    ) -> None:
        start, stop = (0, num_experts) if expert_range is None else expert_range
        if not 0 <= start < stop <= num_experts:
            raise ValueError(f"expert_range {expert_range} is not a non-empty range of the {num_experts} experts")
        self.sizes = {"num_experts": num_experts, "hidden_size": hidden_size, "intermediate_size": intermediate_size}
        #: The experts this converter emits, ``[start, stop)``: all of them unless built by ``for_experts``.
        self.expert_range = (start, stop)
        e, h, i = stop - start, hidden_size, intermediate_size
        self.expected = {
            "gate_up_proj": (e, h, 2 * i),
            "gate_up_proj_bias": (e, 2 * i),
            "down_proj": (e, i, h),
            "down_proj_bias": (e, h),
        }
        self._seen: dict[str, set[str]] = {}

    def for_experts(self, start: int, stop: int) -> GptOssExpertsConverter:
        """A fresh converter that emits experts ``[start, stop)`` of each tensor (one rank's share)."""
        return GptOssExpertsConverter(**self.sizes, expert_range=(start, stop))

    def expert_of(self, key: str) -> int | None:
        """None: gpt_oss stores every layer's experts in one tensor per projection, never one key per expert."""
        return None

    def can_handle(self, key: str) -> bool:
        return _MARKER in key

    def export(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """The hub layout is the modeling's: every entry is written as the model holds it."""
        return [(key, tensor)]

    def convert(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        module, _, name = key.rpartition(".")
        if name.endswith(QUANTIZED_SUFFIXES):
            raise ConversionError(
                f"{key}: an MXFP4-quantized expert tensor (the released gpt-oss checkpoints); this converter reads "
                "the bf16 layout only. Dequantize first: load it with transformers' from_pretrained and "
                "quantization_config=Mxfp4Config(dequantize=True), then save_pretrained, and load that folder"
            )
        if name not in self.expected or not module.endswith(_MARKER.rstrip(".")):
            raise ConversionError(
                f"{key}: not an expert tensor of gpt_oss (expected <layer>.mlp.experts.{{{', '.join(EXPERT_TENSORS)}}}"
                "); gpt_oss checkpoints store the experts fused, never one module per expert"
            )
        expected = self.expected[name]
        start, stop = self.expert_range
        if stop - start != self.sizes["num_experts"] and tensor.dim() and tensor.shape[0] == self.sizes["num_experts"]:
            tensor = tensor[start:stop]  # a whole tensor: keep this range's experts
        if tuple(tensor.shape) != expected:
            layout = {
                "gate_up_proj": "[E, H, 2I]",
                "gate_up_proj_bias": "[E, 2I]",
                "down_proj": "[E, I, H]",
                "down_proj_bias": "[E, H]",
            }[name]
            raise ConversionError(
                f"{key}: shape {tuple(tensor.shape)}, but gpt_oss stores {name} as {layout} = {expected} for this "
                "config (a checkpoint of another size, or one exported in another layout)"
            )
        seen = self._seen.setdefault(module, set())
        if name in seen:
            raise ConversionError(f"{key}: given twice")
        seen.add(name)
        return [(key, tensor)]

    def finalize(self) -> list[tuple[str, torch.Tensor]]:
        incomplete = {
            module: [name for name in EXPERT_TENSORS if name not in names]
            for module, names in self._seen.items()
            if len(names) != len(EXPERT_TENSORS)
        }
        if incomplete:
            listed = "; ".join(f"{module}: {', '.join(names)}" for module, names in sorted(incomplete.items()))
            raise ConversionError(f"expert tensors missing from the checkpoint: {listed}")
        return []


def checkpoint_converter(config: GptOssConfig) -> GptOssExpertsConverter:
    """A fresh converter for one checkpoint of a model built from ``config``."""
    return GptOssExpertsConverter(
        num_experts=config.num_local_experts,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
    )
