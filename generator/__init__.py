"""modelgraft's generator: patched transformers modeling files from declarative configs.

Never imports torch or transformers: upstream source is read from disk.

The patch API is imported on first use of its names, not with the package: a ``patchgen --check``
that the check cache answers loads no config, and so needs none of it (docs/performance.md,
"Generator").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modelgraft.generator.dsl import PatchConfig, create_patch_from_external

__all__ = ["PatchConfig", "create_patch_from_external"]


def __getattr__(name: str) -> Any:
    """``PatchConfig`` and ``create_patch_from_external``, from ``modelgraft.generator.dsl``."""
    if name in __all__:
        from modelgraft.generator import dsl

        return getattr(dsl, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
