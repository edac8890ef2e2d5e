"""A generated module refuses to import under an upstream version other than the one it was generated from.

A generated file is upstream's source of one version, copied and patched. Run under another version it
still imports as a rule, and its classes then mix the copied code of one version with the library code of
another: the result can differ from upstream's with no error at all. So every generated module calls
:func:`require_generated_from` right after its imports, with the version it was generated against, and an
import under another version fails with :class:`UpstreamVersionError`, an ``ImportError`` that says which
versions differ and the two ways out (docs/design.md, "Generated from one upstream version").

The installed version is the package's ``__version__`` (what ``transformers.__version__`` tells a user), read
from the package the generated module has just imported, so the check imports nothing of its own; a package
without one is asked through its distribution's metadata. Importing this module changes no global state
(docs/design.md, "Importing changes nothing").
"""

from __future__ import annotations

import sys

__all__ = ["UpstreamVersionError", "require_generated_from"]


class UpstreamVersionError(ImportError):
    """A generated module was imported under another version of its upstream distribution than it was generated from."""

    def __init__(self, module: str, distribution: str, generated_from: str, installed: str | None) -> None:
        found = (
            f"{distribution} {installed} is installed" if installed else f"no version of {distribution} is readable"
        )
        super().__init__(
            f"{module} was generated from {distribution}=={generated_from}, but {found}: it is {distribution} "
            f"{generated_from}'s code, patched, and under another version it can compute something else without "
            f"any error. Install {distribution}=={generated_from} (the version the project pins), or regenerate "
            f"the generated files under the installed version with `generate-all` "
            f'(docs/design.md, "Generated from one upstream version").',
            name=module,
        )
        self.module = module
        self.distribution = distribution
        self.generated_from = generated_from
        self.installed = installed


def require_generated_from(distribution: str, version: str, module: str) -> None:
    """Raise :class:`UpstreamVersionError` unless the installed ``distribution`` is exactly ``version``.

    ``distribution`` is the upstream's top-level package, named as its distribution is (``transformers``);
    ``module`` is the calling module's ``__name__``, for the message.
    """
    installed = _installed_version(distribution)
    if installed != version:
        raise UpstreamVersionError(module, distribution, version, installed)


def _installed_version(distribution: str) -> str | None:
    """The imported package's ``__version__``; else its distribution's metadata; None when neither says."""
    version = getattr(sys.modules.get(distribution), "__version__", None)
    if isinstance(version, str):
        return version
    from importlib import metadata  # only for a package without __version__: a cost the common case never pays

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
