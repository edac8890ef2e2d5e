"""Qwen3-Omni-MoE (thinker only): generated modeling registered under HF model_type "qwen3_omni_moe", with
upstream's processor and its checkpoint converter, and under "qwen3_omni_moe_thinker", the thinker's own config,
which is what trains."""

from modelgraft.models.converters.registry import register_converter
from modelgraft.models.registry import register_model

MODELING = {"gpu": "modelgraft.models.qwen3_omni_moe.generated.patched_modeling_qwen3_omni_moe_gpu"}

for _model_type, _config in (
    ("qwen3_omni_moe", "transformers.Qwen3OmniMoeConfig"),
    ("qwen3_omni_moe_thinker", "transformers.Qwen3OmniMoeThinkerConfig"),
):
    register_model(_model_type, modeling=MODELING, config=_config, processor="transformers.Qwen3OmniMoeProcessor")
    register_converter(_model_type, "modelgraft.models.qwen3_omni_moe.checkpoint.checkpoint_converter")
