"""Run-time support for the generated model zoo; importing it registers every model.

A model package is a folder of models/ that holds a patch config (``<m>_<backend>_patch_gen_config.py``,
docs/adding-a-model.md); importing it registers the model. Packages are found on disk, so a new model,
scaffolded or written by hand, needs no edit here. Model packages only call
``modelgraft.models.registry.register_model`` with dotted strings, so this import stays free of torch and
transformers and generation-time code can use it.
"""

import importlib
from pathlib import Path

from modelgraft.models import import_hook
from modelgraft.models.registry import MODEL_CONFIG_REGISTRY, MODEL_PROCESSOR_REGISTRY, MODELING_REGISTRY

# Generated modules are adopted as they are imported, so their classes load and save checkpoints
# like upstream's (models/pretrained.py) however they are obtained.
import_hook.install()


def _model_packages() -> tuple[str, ...]:
    """The model packages under models/, by name: run-time support (ops, testing, converters) has no config."""
    root = Path(__file__).parent
    return tuple(
        sorted(
            folder.name
            for folder in root.iterdir()
            if (folder / "__init__.py").is_file() and any(folder.glob("*_patch_gen_config.py"))
        )
    )


#: One entry per model package under models/, found on disk.
MODEL_PACKAGES: tuple[str, ...] = _model_packages()

for _package in MODEL_PACKAGES:
    importlib.import_module(f"{__name__}.{_package}")

__all__ = ["MODELING_REGISTRY", "MODEL_CONFIG_REGISTRY", "MODEL_PACKAGES", "MODEL_PROCESSOR_REGISTRY"]
