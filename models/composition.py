"""The sub-models of a composed model (a VLM's vision tower and language model), built from generated classes.

LLaVA-style models of transformers build their towers with ``AutoModel.from_config(config.vision_config)`` and
``AutoModel.from_config(config.text_config)``: the checkpoint's config picks a CLIP, SigLIP or Pixtral tower and a
Llama, Qwen2 or Gemma decoder. A generated module that kept those calls would run upstream's classes for both, and
none of the op-slot guards of the towers would ever run. The generated ``__init__`` calls
:func:`build_sub_model` instead, which builds the class registered for the sub-config's ``model_type`` in
:data:`modelgraft.models.registry.MODELING_REGISTRY`: a model of the zoo (a decoder) or of the library of
generated vision encoders (docs/vision-encoders.md). The class is the one upstream's ``AutoModel`` picks for that
type, taken from the generated module instead of upstream's.

A type nobody registered is refused with :class:`SubModelError`, which names the type, the configuration
class and how to add it: falling back to upstream's class would train a model whose towers no guard covers,
and nobody would notice.
"""

from __future__ import annotations

from typing import Any

from modelgraft.models.registry import BACKENDS, MODELING_REGISTRY

__all__ = ["SubModelError", "build_sub_model", "sub_model_class"]


class SubModelError(LookupError):
    """A sub-config whose ``model_type`` has no generated class: nothing upstream-only is built in its place."""


def _upstream_class_name(model_type: str) -> str | None:
    # transformers' own table of model_type -> the base model class AutoModel builds.
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(model_type)
    return name if isinstance(name, str) else None


def sub_model_class(config: Any, *, backend: str = "gpu") -> type:
    """The generated class that stands for ``AutoModel.from_config(config)``, by ``config.model_type``.

    ``backend`` picks the registered module (the ``gpu`` module serves every backend without one of its own).
    Raises :class:`SubModelError` when the type is not registered, when upstream's ``AutoModel`` has no class
    for it, or when the registered module lacks that class.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    model_type = getattr(config, "model_type", None)
    what = f"sub-model of type {model_type!r} ({type(config).__name__})"
    upstream_name = _upstream_class_name(model_type) if isinstance(model_type, str) else None
    if upstream_name is None:
        raise SubModelError(f"{what}: transformers' AutoModel has no class for this type, so nothing can stand for it")
    if model_type not in MODELING_REGISTRY:
        raise SubModelError(
            f"{what}: no generated class is registered for it, and upstream's {upstream_name} would run without any "
            "op-slot guard. Add a model package that registers this model_type: a decoder is scaffolded with "
            "`copier copy` (docs/adding-a-model.md), a vision encoder is a config with the vision_encoder recipe "
            '(docs/vision-encoders.md, "Adding an encoder")'
        )
    module = MODELING_REGISTRY.get_module(model_type, backend)
    cls = getattr(module, upstream_name, None)
    if not isinstance(cls, type):
        raise SubModelError(
            f"{what}: the registered module {module.__name__} has no class {upstream_name}, the class upstream's "
            "AutoModel builds for it; keep that class in the generated output"
        )
    return cls


def build_sub_model(config: Any, *, backend: str = "gpu", **kwargs: Any) -> Any:
    """``AutoModel.from_config(config, **kwargs)``, with the generated class of :func:`sub_model_class`."""
    return sub_model_class(config, backend=backend)._from_config(config, **kwargs)
