"""Generated classes load and save checkpoints the way their upstream counterparts do, and load strictly.

Why this is needed. transformers rewrites checkpoint keys while loading and saving (its
``conversion_mapping.py``: qwen3_moe's per-expert weights are fused on load and split again on save,
deepseek_v4's hub names are renamed, ...). It looks the rewrites up by class name and ``model_type``,
but ``get_model_conversion_mapping`` skips every class for which ``PreTrainedModel.is_custom_code()``
is true unless that class name or ``model_type`` was registered by the user, and upstream counts any
class whose module lies outside ``transformers.`` as custom code. A generated class is therefore
loaded without the conversion: the fused experts are reported missing and keep their random
initialisation, and transformers only logs it.

What is done instead. A generated module keeps upstream's modules and parameter names (each model's
parity tests prove its state dict equals upstream's), so its classes can use upstream's conversions as
they are. :func:`adopt_generated_module` declares the classes of one generated module to be
transformers' own code for that check (``is_custom_code`` is upstream's rule, except that a class
defined in an adopted module is custom only if it is remote code). transformers' loader and
``save_pretrained`` then apply the ``model_type``'s conversions to it exactly as to the upstream class.

Registering the model types with ``register_checkpoint_conversion_mapping`` was rejected: that
registration is global, so remote code of the same ``model_type`` (DeepSeek-V3's hub code, with
per-expert ``nn.ModuleList`` experts) would get the fusing conversion too and stop loading.

Strict loading. transformers' ``from_pretrained`` fills a weight the checkpoint lacks with a fresh
initialisation and drops a tensor the model lacks, and only logs both. The ``from_pretrained`` of an
adopted class raises :class:`~models.checkpoint.CheckpointError` instead, naming the checkpoint, the
class and the keys; ``strict=False`` is the explicit opt-out (upstream's behaviour; pass
``output_loading_info=True`` to get the keys back). Keys upstream itself ignores
(``_keys_to_ignore_on_load_missing`` / ``_unexpected``, tied weights) are not reported, and size
mismatches stay upstream's error (``ignore_mismatched_sizes=True`` is upstream's opt-out for those).

Adoption happens on import of a generated module (``modelgraft.models.import_hook``), so a class behaves the same
whether it came from the registry, the loader or a plain import.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from transformers import PreTrainedModel

from modelgraft.models.checkpoint import CheckpointError, describe_key_problems

__all__ = ["adopt_generated_module", "is_adopted", "require_complete_load"]

#: Names of the adopted generated modules: their classes are treated as transformers' own code.
_ADOPTED_MODULES: set[str] = set()

_UPSTREAM_IS_CUSTOM_CODE: Callable[[type[PreTrainedModel]], bool] = PreTrainedModel.is_custom_code.__func__


def is_adopted(cls: type) -> bool:
    """True if ``cls`` is defined in an adopted generated module (a subclass defined elsewhere is not)."""
    return cls.__module__ in _ADOPTED_MODULES


def _is_custom_code(cls: type[PreTrainedModel]) -> bool:
    """Upstream's rule, except that a class of an adopted module is custom code only if it is remote code.

    Subclasses written elsewhere (a user's own module) inherit this and get upstream's rule back, since
    their layout is not known to be upstream's.
    """
    if is_adopted(cls):
        return cls.is_remote_code()
    return _UPSTREAM_IS_CUSTOM_CODE(cls)


def require_complete_load(cls: type, checkpoint: Any, loading_info: Mapping[str, Any]) -> None:
    """Raise CheckpointError if ``loading_info`` (transformers' loading report) lists missing or unexpected keys."""
    missing = loading_info.get("missing_keys") or ()
    unexpected = loading_info.get("unexpected_keys") or ()
    if not missing and not unexpected:
        return
    raise CheckpointError(
        f"checkpoint {checkpoint} does not fit {cls.__module__}.{cls.__qualname__}: "
        f"{describe_key_problems(missing, unexpected)}. from_pretrained(..., strict=False) loads it anyway, "
        "with the missing weights freshly initialised and the unexpected ones dropped"
    )


def _strict(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (upstream's ``from_pretrained`` function) raising on missing or unexpected keys unless ``strict=False``."""

    @functools.wraps(original)
    def from_pretrained(cls: type[PreTrainedModel], *args: Any, strict: bool = True, **kwargs: Any) -> Any:
        wants_info = kwargs.pop("output_loading_info", False)
        model, loading_info = original(cls, *args, output_loading_info=True, **kwargs)
        if strict:
            checkpoint = args[0] if args else kwargs.get("pretrained_model_name_or_path")
            require_complete_load(cls, checkpoint, loading_info)
        return (model, loading_info) if wants_info else model

    from_pretrained.__doc__ = (
        "Upstream's from_pretrained, strict: missing or unexpected weights raise CheckpointError unless "
        "strict=False (models/pretrained.py).\n\n" + (original.__doc__ or "")
    )
    from_pretrained._modelgraft_strict = True  # type: ignore[attr-defined]
    return from_pretrained


def _install(cls: type[PreTrainedModel]) -> None:
    """Give ``cls`` the adopted ``is_custom_code`` and the strict ``from_pretrained``, unless a base already did."""
    if getattr(cls.is_custom_code, "__func__", None) is not _is_custom_code:
        cls.is_custom_code = classmethod(_is_custom_code)  # type: ignore[method-assign,assignment]
    current = cls.from_pretrained.__func__  # type: ignore[attr-defined]
    if not getattr(current, "_modelgraft_strict", False):
        cls.from_pretrained = classmethod(_strict(current))  # type: ignore[method-assign,assignment]


def adopt_generated_module(module: ModuleType) -> None:
    """Make every model class defined in ``module`` load and save like upstream's, strictly (module docstring).

    Idempotent. Bases are handled before subclasses, so a subclass inherits the wrapper instead of
    wrapping it a second time. A module of transformers itself is left alone: its classes are upstream's.
    """
    if module.__name__.startswith("transformers."):
        return
    _ADOPTED_MODULES.add(module.__name__)
    classes = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, PreTrainedModel) and value.__module__ == module.__name__
    ]
    for cls in sorted(classes, key=lambda c: len(c.__mro__)):
        _install(cls)
