"""Run-time support for the generated model zoo; importing it fills the model registries and does nothing else.

A model package is a subpackage of ``modelgraft.models`` that holds a patch config
(``<m>_<backend>_patch_gen_config.py``, docs/adding-a-model.md); importing it registers the model with
``modelgraft.models.registry.register_model``, as dotted strings, so this import stays free of torch and
transformers and generation-time code can use it.

Model packages are found with ``pkgutil.iter_modules`` over this package's ``__path__``: the import system's
own listing, so it sees what is installed (a wheel, an editable checkout) and nothing next to it, and it
reads each subpackage's file list without importing it. Run-time support (``ops``, ``converters``,
``distributed``, ``testing``) has no patch config and is never imported here: ``distributed`` would pull in
torch, ``testing`` needs pytest (the test extra).

Discovery is eager, at import, rather than on the first registry lookup: the registries live in
``registry.py`` and are iterated directly (every registered model type, at test collection, by the
loader), so a lazy fill would have to hook every way of reading them. Importing a handful of
``register_model`` calls costs milliseconds. Nothing else happens on import: no finder on
``sys.meta_path``, no patched class, nothing registered with transformers (docs/design.md, "Importing
changes nothing").
"""

import importlib
import pkgutil

from modelgraft.models.registry import MODEL_CONFIG_REGISTRY, MODEL_PROCESSOR_REGISTRY, MODELING_REGISTRY

#: How a model package's patch configs are named (discovery's rule, [tool.patchgen] in pyproject.toml).
_CONFIG_SUFFIX = "_patch_gen_config"


def _model_packages() -> tuple[str, ...]:
    """The subpackages that hold a patch config, by name, without importing any of them."""
    found = []
    for package in pkgutil.iter_modules(__path__):
        if not package.ispkg:
            continue
        spec = package.module_finder.find_spec(package.name)  # a path-entry finder: the name's last part
        locations = spec.submodule_search_locations if spec is not None else None
        if locations and any(child.name.endswith(_CONFIG_SUFFIX) for child in pkgutil.iter_modules(locations)):
            found.append(package.name)
    return tuple(sorted(found))


#: One entry per model package of ``modelgraft.models``, found through the import system.
MODEL_PACKAGES: tuple[str, ...] = _model_packages()

for _package in MODEL_PACKAGES:
    importlib.import_module(f"{__name__}.{_package}")

#: The common path of a training script, importable from here (``from modelgraft.models import build_model``),
#: each name resolved on first use (PEP 562) so that this import stays free of torch: the module defining it.
#: Parallelism has its own entry point, ``modelgraft.models.distributed.parallelize``.
_ENTRY_POINTS = {
    "build_model": "modelgraft.models.loader",
    "get_model_class": "modelgraft.models.loader",
    "load_checkpoint": "modelgraft.models.checkpoint",
    "OpsConfig": "modelgraft.models.ops",
    "bind_ops": "modelgraft.models.ops",
    "bound_ops": "modelgraft.models.ops",
}


def __getattr__(name: str) -> object:
    module = _ENTRY_POINTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_ENTRY_POINTS])


__all__ = [
    "MODELING_REGISTRY",
    "MODEL_CONFIG_REGISTRY",
    "MODEL_PACKAGES",
    "MODEL_PROCESSOR_REGISTRY",
    "OpsConfig",
    "bind_ops",
    "bound_ops",
    "build_model",
    "get_model_class",
    "load_checkpoint",
]
