"""Qwen2.5-Omni (thinker only): generated modeling registered under HF model_type "qwen2_5_omni", with upstream's
processor and its checkpoint converter, and under "qwen2_5_omni_thinker", the thinker's own config, which is what
trains."""

from modelgraft.models.converters.registry import register_converter
from modelgraft.models.registry import register_model

MODELING = {"gpu": "modelgraft.models.qwen2_5_omni.generated.patched_modeling_qwen2_5_omni_gpu"}

register_model(
    "qwen2_5_omni",
    modeling=MODELING,
    config="transformers.Qwen2_5OmniConfig",
    processor="transformers.Qwen2_5OmniProcessor",
)
register_model(
    "qwen2_5_omni_thinker",
    modeling=MODELING,
    config="transformers.Qwen2_5OmniThinkerConfig",
    processor="transformers.Qwen2_5OmniProcessor",
)
register_converter("qwen2_5_omni", "modelgraft.models.converters.omni.thinker_converter")
register_converter("qwen2_5_omni_thinker", "modelgraft.models.converters.omni.thinker_converter")
