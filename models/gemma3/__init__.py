"""Gemma3: generated modeling registered under HF model_types "gemma3_text" (the text model) and "gemma3" (the VLM).

One generated module serves both: ``Gemma3ForCausalLM`` on ``Gemma3TextConfig``, and
``Gemma3ForConditionalGeneration`` on ``Gemma3Config``, whose SigLIP tower and text model are generated classes
too (``modelgraft.models.composition``).
"""

from modelgraft.models.registry import register_model

register_model(
    "gemma3_text",
    modeling={"gpu": "modelgraft.models.gemma3.generated.patched_modeling_gemma3_gpu"},
    config="transformers.Gemma3TextConfig",
)
register_model(
    "gemma3",
    modeling={"gpu": "modelgraft.models.gemma3.generated.patched_modeling_gemma3_gpu"},
    config="transformers.Gemma3Config",
    processor="transformers.Gemma3Processor",
)
