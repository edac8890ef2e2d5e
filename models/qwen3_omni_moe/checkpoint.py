"""Qwen3-Omni-MoE checkpoints: the thinker's hub weights -> the generated modeling's names and fused experts.

The generated modeling holds the thinker as upstream does: its towers and text decoder inside the thinker
model (``thinker.model.audio_tower``, ``thinker.model.visual``, ``thinker.model.language_model``), and each sparse
layer's experts fused, ``gate_up_proj [E, 2I, H]`` and ``down_proj [E, H, I]`` (H = ``text_config.hidden_size``,
I = ``text_config.moe_intermediate_size`` of the thinker). The hub checkpoints of this model
(Qwen/Qwen3-Omni-30B-A3B-*) keep the earlier names (``thinker.audio_tower.*``, ``thinker.visual.*``,
``thinker.model.layers.*``) and store one ``nn.Linear`` per expert,
``thinker.model.layers.<l>.mlp.experts.<e>.{gate,up,down}_proj.weight`` (``[I, H]``, ``[I, H]``, ``[H, I]``):
the pinned transformers renames them with the "Qwen2_5OmniThinkerForConditionalGeneration" entry of
``conversion_mapping.py`` and fuses the experts with its "qwen2_moe" entry, which "qwen3_omni_moe" and
"qwen3_omni_moe_thinker" name, and undoes both on save; the converter does the same
(:class:`~models.converters.omni.OmniThinkerConverter`). No transposed fused layout exists for this model (unlike
Qwen3-VL-MoE's hub files), so the layout is declared, ``nn.Linear``'s ``[out, in]``: a square shape (``H == 2I``,
``H == I``) has nothing to decide.

A whole-model checkpoint also holds the talker's MoE experts (``talker.model.layers...``), of the talker's sizes:
the converter leaves them alone, and the thinker-only top-level class drops them with the rest of the speech side.
Registered for model_types "qwen3_omni_moe" and "qwen3_omni_moe_thinker" in ``models/qwen3_omni_moe/__init__.py``;
``load_checkpoint`` uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelgraft.models.converters.moe import FusedExpertsConverter
from modelgraft.models.converters.omni import OmniThinkerConverter

if TYPE_CHECKING:
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeThinkerConfig

#: The whole model's speech side, whose experts are not the thinker's (dropped on load by the top-level class).
SPEECH_PREFIXES = ("talker.", "code2wav.")


def checkpoint_converter(config: Qwen3OmniMoeConfig | Qwen3OmniMoeThinkerConfig) -> OmniThinkerConverter:
    """A fresh converter for one checkpoint of a model built from ``config`` (the thinker's expert sizes)."""
    thinker = getattr(config, "thinker_config", config)
    text = thinker.get_text_config()
    return OmniThinkerConverter(
        FusedExpertsConverter(
            num_experts=text.num_experts,
            hidden_size=text.hidden_size,
            intermediate_size=text.moe_intermediate_size,
            layout="fused",
            ignore=SPEECH_PREFIXES,
        )
    )
