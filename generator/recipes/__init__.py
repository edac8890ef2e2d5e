"""Category recipes: one call that applies every snippet a model category shares, and the parts they guard."""

from modelgraft.generator.recipes.audio_lm import composed_audio
from modelgraft.generator.recipes.dense import dense_text
from modelgraft.generator.recipes.hybrid import (
    GatedDeltaNet,
    ShortConvolution,
    gated_delta_net_moe_text,
    gated_delta_net_text,
    short_convolution_moe_text,
    short_convolution_text,
)
from modelgraft.generator.recipes.moe import moe_text
from modelgraft.generator.recipes.omni import AudioTower, omni
from modelgraft.generator.recipes.omni_moe import omni_moe
from modelgraft.generator.recipes.parts import CallSites, Experts, LossHead, Mlp, Norm, Rope, Router
from modelgraft.generator.recipes.vision_encoder import vision_encoder
from modelgraft.generator.recipes.vlm import VisionTower, vlm
from modelgraft.generator.recipes.vlm_composed import composed_vlm
from modelgraft.generator.recipes.vlm_moe import vlm_moe

__all__ = [
    "AudioTower",
    "CallSites",
    "Experts",
    "GatedDeltaNet",
    "LossHead",
    "Mlp",
    "Norm",
    "Rope",
    "Router",
    "ShortConvolution",
    "VisionTower",
    "composed_audio",
    "composed_vlm",
    "dense_text",
    "gated_delta_net_moe_text",
    "gated_delta_net_text",
    "moe_text",
    "omni",
    "omni_moe",
    "short_convolution_moe_text",
    "short_convolution_text",
    "vision_encoder",
    "vlm",
    "vlm_moe",
]
