"""DeepSeek-V3: generated modeling registered under HF model_type "deepseek_v3", with its checkpoint converter."""

from modelgraft.models.converters.registry import register_converter
from modelgraft.models.registry import register_model

register_model(
    "deepseek_v3",
    modeling={"gpu": "modelgraft.models.deepseek_v3.generated.patched_modeling_deepseek_v3_gpu"},
    config="transformers.DeepseekV3Config",
)
register_converter("deepseek_v3", "modelgraft.models.deepseek_v3.checkpoint.checkpoint_converter")
