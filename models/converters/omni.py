"""Qwen-Omni thinker checkpoints: the hub's names of the thinker's weights -> the thinker model's, then fused experts.

In transformers 5.25 a Qwen-Omni thinker holds its audio tower, vision tower and text decoder in a thinker model
(``thinker.model``: ``audio_tower``, ``visual``, ``language_model``), as a Qwen-VL head holds its ``<Prefix>Model``.
The hub checkpoints, and upstream's own ``save_pretrained``, keep the earlier names::

    thinker.audio_tower.<...>         -> thinker.model.audio_tower.<...>
    thinker.visual.<...>              -> thinker.model.visual.<...>
    thinker.model.<...>               -> thinker.model.language_model.<...>   (the text decoder)
    thinker.lm_head.weight               unchanged

(the same without ``thinker.`` for a checkpoint of the thinker alone), which transformers renames on load with the
"Qwen2_5OmniThinkerForConditionalGeneration" entry of ``conversion_mapping.py`` (Qwen3-Omni-MoE's thinker classes map
to it) and back on save. :class:`OmniThinkerConverter` makes the same renames for ``load_checkpoint``, then hands
the thinker's expert weights to a :class:`~models.converters.moe.FusedExpertsConverter`; keys already in the
modeling's names, and the speech side's (``talker.*``, ``code2wav.*``), pass through unchanged. Its ``export``
writes the hub's names back. Expert-parallel loading reads only a rank's own experts through it
(``for_experts`` / ``expert_of``, as the fusing converter's). A dense thinker (Qwen2.5-Omni) has the renames
alone: :func:`thinker_converter`.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from modelgraft.models.converters.moe import FusedExpertsConverter

__all__ = ["OmniThinkerConverter", "hub_key", "model_key", "thinker_converter"]

#: Hub name -> the thinker model's name (upstream's conversion, as regular expressions on a whole key).
_TO_MODEL = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"^(thinker\.)?audio_tower\.", r"\1model.audio_tower."),
        (r"^(thinker\.)?visual\.", r"\1model.visual."),
        (r"^(thinker\.)?model\.(?!(?:language_model|visual|audio_tower)\.)", r"\1model.language_model."),
    )
)
#: The thinker model's name -> the hub's (what upstream's ``save_pretrained`` writes).
_TO_HUB = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"^(thinker\.)?model\.audio_tower\.", r"\1audio_tower."),
        (r"^(thinker\.)?model\.visual\.", r"\1visual."),
        (r"^(thinker\.)?model\.language_model\.", r"\1model."),
    )
)


def _rewrite(key: str, rules: tuple[tuple[re.Pattern[str], str], ...]) -> str:
    for pattern, replacement in rules:
        renamed = pattern.sub(replacement, key, count=1)
        if renamed != key:
            return renamed
    return key


def model_key(key: str) -> str:
    """The modeling's name of ``key``: a hub name of a thinker weight renamed, any other key unchanged."""
    return _rewrite(key, _TO_MODEL)


def hub_key(key: str) -> str:
    """The hub's name of modeling key ``key``; ``model_key(hub_key(k)) == k`` for every key of the modeling."""
    return _rewrite(key, _TO_HUB)


class OmniThinkerConverter:
    """The thinker's hub names -> the thinker model's, then its per-expert weights -> the fused expert tensors.

    Handles every key whose name changes and every expert key of the thinker; other keys (already the modeling's,
    the speech side's, ``lm_head``) load as they are. ``experts`` is None for a dense thinker (Qwen2.5-Omni):
    then only the names change.
    """

    def __init__(self, experts: FusedExpertsConverter | None = None) -> None:
        self.experts = experts

    def _is_expert(self, key: str) -> bool:
        return self.experts is not None and self.experts.can_handle(key)

    # -- expert parallelism -----------------------------------------------------------------------
    def for_experts(self, start: int, stop: int) -> OmniThinkerConverter:
        """The same conversion, fusing only experts ``[start, stop)`` of each layer (one rank's share)."""
        return OmniThinkerConverter(None if self.experts is None else self.experts.for_experts(start, stop))

    def expert_of(self, key: str) -> int | None:
        return None if self.experts is None else self.experts.expert_of(model_key(key))

    def rename(self, key: str) -> str | None:
        """The modeling's name of a key loaded unchanged but for its name; None for an expert key, which the
        fusing converter must see whole (``modelgraft.models.distributed.sharded_load``)."""
        renamed = model_key(key)
        return None if self._is_expert(renamed) else renamed

    # -- the protocol ---------------------------------------------------------------------------
    def can_handle(self, key: str) -> bool:
        renamed = model_key(key)
        return renamed != key or self._is_expert(renamed)

    def convert(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        renamed = model_key(key)
        if self._is_expert(renamed):
            return self.experts.convert(renamed, tensor)
        return [(renamed, tensor)]

    def finalize(self) -> list[tuple[str, torch.Tensor]]:
        return [] if self.experts is None else self.experts.finalize()

    # -- the way back ------------------------------------------------------------------------------
    def export(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """One whole modeling entry under the hub's names, the thinker's experts one linear each."""
        entries = [(key, tensor)] if self.experts is None else self.experts.export(key, tensor)
        return [(hub_key(name), value) for name, value in entries]


def thinker_converter(config: Any) -> OmniThinkerConverter:
    """The converter of a dense Qwen-Omni thinker's checkpoints (the names only), for either config: registered
    by the model's package for both model types, as a MoE thinker's own ``checkpoint_converter`` is."""
    del config  # the renames do not depend on the sizes
    return OmniThinkerConverter()
