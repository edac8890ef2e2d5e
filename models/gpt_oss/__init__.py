"""GptOss: generated modeling registered under HF model_type "gpt_oss", with its checkpoint converter."""

from modelgraft.models.converters.registry import register_converter
from modelgraft.models.registry import register_model

register_model(
    "gpt_oss",
    modeling={"gpu": "modelgraft.models.gpt_oss.generated.patched_modeling_gpt_oss_gpu"},
    config="transformers.GptOssConfig",
)
register_converter("gpt_oss", "modelgraft.models.gpt_oss.checkpoint.checkpoint_converter")
