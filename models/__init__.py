"""Run-time support for the generated model zoo; importing it registers every model.

Model packages only call ``models.registry.register_model`` with dotted strings, so this import stays
free of torch and transformers and generation-time code can use it.
"""

import importlib

from models.registry import MODEL_CONFIG_REGISTRY, MODEL_PROCESSOR_REGISTRY, MODELING_REGISTRY

#: One entry per model package under models/; adding a model is adding its name here.
MODEL_PACKAGES: tuple[str, ...] = (
    "llama",
    "qwen3",
    "qwen2",
    "seed_oss",
    "gemma3",
    "qwen3_moe",
)

for _package in MODEL_PACKAGES:
    importlib.import_module(f"{__name__}.{_package}")
del _package

__all__ = ["MODELING_REGISTRY", "MODEL_CONFIG_REGISTRY", "MODEL_PACKAGES", "MODEL_PROCESSOR_REGISTRY"]
