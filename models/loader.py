"""Build a model: the generated class for a registered ``model_type``, or plain transformers on request.

The loader is a convenience, not a requirement: a generated class used directly behaves like upstream
because unbound slots run upstream code. What the loader adds is choosing the class from a config,
binding the requested kernels (and the backend's kernel family) to the model it builds, and clear errors
when something is missing.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Iterable
from typing import Any

import torch
import transformers
from transformers import PreTrainedConfig, PreTrainedModel, initialization

from modelgraft.models.ops import OpsConfig, bind_ops
from modelgraft.models.ops.binding import (
    attach_ops,
    current_bindings,
    refuse_shadowing,
    refuse_unconsulted,
    restore_bindings,
)
from modelgraft.models.registry import (
    BACKEND_KERNELS,
    BACKENDS,
    MODEL_CONFIG_REGISTRY,
    MODELING_REGISTRY,
    UnknownEntryError,
)

__all__ = ["backend_ops", "build_model", "get_model_class"]


def _hf_class(architecture: str) -> type[PreTrainedModel]:
    cls = getattr(transformers, architecture, None)
    if not isinstance(cls, type) or not issubclass(cls, PreTrainedModel):
        raise UnknownEntryError(f"transformers {transformers.__version__} has no model class {architecture!r}")
    return cls


def get_model_class(
    model_type: str, architecture: str, backend: str = "gpu", use_hf: bool = False
) -> type[PreTrainedModel]:
    """The class to instantiate for ``architecture`` of ``model_type``.

    ``use_hf=True`` returns ``transformers.<architecture>`` (the opt-out: upstream code, slots ignored);
    otherwise the class of that name in the model's generated module for ``backend``.
    """
    if use_hf:
        return _hf_class(architecture)
    return MODELING_REGISTRY.get_class(model_type, architecture, backend)


def backend_ops(backend: str, ops: OpsConfig | None) -> OpsConfig | None:
    """The ops a model built for ``backend`` runs: the backend's kernel family, then ``ops`` on top.

    Backends share their generated code and differ in kernels, so asking for one is asking for its family
    (``npu``: torch_npu's kernels) on every slot the family serves. A slot that ``ops`` names, ``"eager"``
    included, runs what ``ops`` says, with ``ops``'s kernel options. A backend without a family (``gpu``)
    leaves ``ops`` as given.
    """
    if backend not in BACKEND_KERNELS:
        raise UnknownEntryError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    family = BACKEND_KERNELS[backend]
    if family is None:
        return ops
    kernels = dict(OpsConfig.everywhere(family).kernels)
    if ops is None:
        return OpsConfig(kernels)
    return OpsConfig({**kernels, **ops.kernels}, kernel_options=ops.kernel_options)


def _refuse_unknown_keys(config: PreTrainedConfig, keys: Iterable[str]) -> None:
    """A key the config class does not know would be stored as an attribute no code reads (``hiden_size``),
    and the model built with the default it was meant to replace."""
    accepted = set(inspect.signature(type(config).__init__).parameters)
    unknown = sorted(key for key in keys if key not in accepted and not hasattr(config, key))
    if unknown:
        raise ValueError(f"{type(config).__name__} has no attribute(s) {unknown} to set")


def _config_from_architecture(architecture: str, use_hf: bool, overrides: dict[str, Any]) -> PreTrainedConfig:
    """Upstream names the config class of every model class; the registry says which one we build."""
    upstream_config_cls = _hf_class(architecture).config_class
    config_cls = upstream_config_cls if use_hf else MODEL_CONFIG_REGISTRY[upstream_config_cls.model_type]
    _refuse_unknown_keys(config_cls(), overrides)
    return config_cls(**overrides)


def _config_with_overrides(config: PreTrainedConfig, overrides: dict[str, Any]) -> PreTrainedConfig:
    _refuse_unknown_keys(config, overrides)
    config = copy.deepcopy(config)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def _architecture_of(config: PreTrainedConfig, architecture: str | None) -> str:
    if architecture is not None:
        return architecture
    if config.architectures:
        return config.architectures[0]
    raise ValueError(f"{type(config).__name__} lists no architectures; pass architecture= (e.g. 'Qwen3ForCausalLM')")


def build_model(
    config_or_architecture: PreTrainedConfig | str,
    *,
    backend: str = "gpu",
    ops: OpsConfig | None = None,
    use_hf: bool = False,
    architecture: str | None = None,
    attn_implementation: str | None = None,
    device: str | torch.device | None = None,
    **config_overrides: Any,
) -> PreTrainedModel:
    """Instantiate a model with freshly initialized weights (``cls(config)``).

    ``config_or_architecture`` is either a config instance, whose class is ``architecture`` or else
    ``config.architectures[0]`` (no guessing: a config without architectures needs ``architecture=``),
    or an architecture name such as ``"Qwen3ForCausalLM"``, whose config is built from
    ``config_overrides`` by the config class registered for its model_type (upstream's, with ``use_hf``).
    For a config instance, ``config_overrides`` are set as attributes on a copy, as
    ``from_pretrained(**kwargs)`` does: values derived from them in the config's ``__init__`` are not
    recomputed. ``attn_implementation`` selects the attention backend either way.

    ``backend`` picks the generated module (the one every backend shares, unless the backend's code
    differs) and adds the backend's kernel family to ``ops`` (:func:`backend_ops`): ``backend="npu"``
    binds the npu kernels, and raises ``KernelUnavailableError`` where torch_npu is missing.

    ``ops`` stays with the model: every call of it (or of one of its submodules) runs ``ops``'s kernels
    and restores the previous bindings on return (``attach_ops``), so a second model built with other ops
    does not change this one's; ``model.ops_config`` records ``ops``. ``ops`` is also bound globally before
    the model is built, for code that runs slots outside a model built with ops. Without ``ops``
    (``model.ops_config`` None) the model runs whatever is bound globally when it is called, and the
    binding is left alone. ``use_hf=True`` builds the plain transformers class, which never consults
    slots, so non-eager ops are rejected. Two more bindings would do nothing or the wrong thing, and are
    refused before anything changes (``OpsConfigError``): a kernel on a slot that no code of the model
    consults (the experts kernel on a dense model), and ``ops`` while distributed kernels are bound
    process-wide (``bind_ops(parallel_ops(state))``), which the model's own ops would replace on every call
    (``OpsConflictError``: pass them as ``parallel_ops(state, base=ops)``, or use ``attach_parallel``).

    ``device="meta"`` builds the model without allocating its parameters or buffers, as transformers'
    ``from_pretrained`` does (``torch.device("meta")`` and ``meta_device_safe_creation_ops``; weight
    initialization is skipped on meta): a model too big for one process can be sharded first and then
    materialized shard by shard (``modelgraft.models.distributed.materialize``). Another ``device``
    builds the model there, initialized as usual.
    """
    if isinstance(config_or_architecture, str):
        if architecture is not None and architecture != config_or_architecture:
            raise ValueError(
                f"conflicting architectures: {config_or_architecture!r} positionally, {architecture!r} by keyword"
            )
        architecture = config_or_architecture
        config = _config_from_architecture(architecture, use_hf, config_overrides)
    else:
        architecture = _architecture_of(config_or_architecture, architecture)
        config = _config_with_overrides(config_or_architecture, config_overrides)
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation

    if use_hf and ops is not None and not ops.is_eager:
        raise ValueError(f"ops {dict(ops.kernels)} have no effect on a plain transformers model (use_hf=True)")
    cls = get_model_class(config.model_type, architecture, backend=backend, use_hf=use_hf)
    requested = ops
    if not use_hf:
        ops = backend_ops(backend, ops)
    if ops is None:
        model = _instantiate(cls, config, device)
        model.ops_config = None
        return model
    # Loads and checks every kernel (one that cannot run here changes nothing), before bind_ops would
    # replace the process's distributed kernels.
    refuse_shadowing(ops, architecture)
    found = current_bindings()
    bind_ops(ops)
    try:
        model = _instantiate(cls, config, device)
        if requested is not None:
            refuse_unconsulted(model, requested)
    except BaseException:
        restore_bindings(found)
        raise
    return attach_ops(model, ops)


def _instantiate(
    cls: type[PreTrainedModel], config: PreTrainedConfig, device: str | torch.device | None
) -> PreTrainedModel:
    """``cls(config)``, under ``device`` when given (on meta, with transformers' own meta-safe creation ops)."""
    if device is None:
        return cls(config)
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.device(device))
        if torch.device(device).type == "meta":
            stack.enter_context(initialization.meta_device_safe_creation_ops())
        return cls(config)
