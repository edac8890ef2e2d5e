"""Adopt every generated modeling module as it is imported, however it is imported.

A generated class must load and save checkpoints like upstream's (``modelgraft.models.pretrained``) whether it was
obtained from the registry, from the loader, or by a plain ``from modelgraft.models.<m>.generated... import X``
(design: a generated class used directly behaves like upstream; nothing may depend on a step the user
has to remember). The generated files themselves cannot call anything after their classes are defined,
so a finder on ``sys.meta_path`` does it: for a module registered in ``MODELING_REGISTRY`` it wraps the
loader that would have loaded it anyway, and after the module ran it calls
``modelgraft.models.pretrained.adopt_generated_module`` and registers ``modelgraft.models.attention``'s ``"fused_attention"``
with transformers, so ``from_pretrained(..., attn_implementation="fused_attention")`` works as soon as
a generated class exists.

This module is standard library only: ``import modelgraft.models`` installs the finder and must stay free of torch
and transformers; ``modelgraft.models.pretrained`` is imported only once a generated module (which imports both
anyway) has been executed; ``modelgraft.models.attention`` likewise.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

from modelgraft.models.registry import MODELING_REGISTRY

__all__ = ["GeneratedModuleFinder", "install"]


class _AdoptingLoader:
    """The loader that found the module, followed by adoption once the module's code has run."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        from modelgraft.models.attention import register_fused_attention
        from modelgraft.models.pretrained import adopt_generated_module

        adopt_generated_module(module)
        register_fused_attention()

    def __getattr__(self, name: str) -> Any:
        # get_source, get_filename, get_resource_reader, ...: whatever the wrapped loader offers.
        if name == "_loader":  # not set yet (copy, pickle): no recursion through this method
            raise AttributeError(name)
        return getattr(self._loader, name)


class GeneratedModuleFinder:
    """A meta-path finder that only ever answers for registered generated modules, by asking the others."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        # A registered transformers module (tests register upstream's own as a stand-in) is upstream already.
        if fullname.startswith("transformers.") or fullname not in MODELING_REGISTRY.module_paths():
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, GeneratedModuleFinder) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and not isinstance(spec.loader, _AdoptingLoader):
                    spec.loader = _AdoptingLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once per process."""
    if not any(isinstance(finder, GeneratedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, GeneratedModuleFinder())
