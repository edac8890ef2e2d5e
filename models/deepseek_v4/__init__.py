"""DeepSeek-V4: generated modeling registered under HF model_type "deepseek_v4", with its checkpoint converter."""

from modelgraft.models.converters.registry import register_converter
from modelgraft.models.registry import register_model

register_model(
    "deepseek_v4",
    modeling={"gpu": "modelgraft.models.deepseek_v4.generated.patched_modeling_deepseek_v4_gpu"},
    config="transformers.DeepseekV4Config",
)
register_converter("deepseek_v4", "modelgraft.models.deepseek_v4.checkpoint.checkpoint_converter")
