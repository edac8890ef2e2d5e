"""One typed hierarchy for every user-facing failure of the generator.

Every check raises a subclass of :class:`PatchgenError`; only the CLI turns
them into messages and exit code 2.  Each error names the config, the target
and the cause, so a failing CI log is actionable without re-running locally.
"""

from __future__ import annotations


class PatchgenError(Exception):
    """Bad input: a config, a target or an environment the generator cannot use."""

    def __init__(self, cause: str, *, config: str | None = None, target: str | None = None) -> None:
        self.cause = cause
        self.config = config
        self.target = target
        super().__init__(self.format())

    def format(self, config_file: str | None = None) -> str:
        """``config <module> (<file>), target <target>: <cause>``, leaving out what is unknown."""
        where = []
        if self.config:
            where.append(f"config {self.config}" + (f" ({config_file})" if config_file else ""))
        if self.target:
            where.append(f"target {self.target}")
        prefix = f"{', '.join(where)}: " if where else ""
        return f"{prefix}{self.cause}"

    def __reduce__(self):
        # Keep config/target when an error crosses a process boundary (parallel generation).
        return (_rebuild, (type(self), self.cause, self.config, self.target))

    def with_context(self, *, config: str | None = None, target: str | None = None) -> PatchgenError:
        """Fill in context that the raising layer did not know, keeping the cause."""
        return type(self)(self.cause, config=self.config or config, target=self.target or target)


def _rebuild(cls: type[PatchgenError], cause: str, config: str | None, target: str | None) -> PatchgenError:
    return cls(cause, config=config, target=target)


class ConfigLoadError(PatchgenError):
    """A config module could not be imported or holds no usable PatchConfig."""


class DiscoveryError(PatchgenError):
    """The `[tool.patchgen]` settings or a discovery root are unusable."""


class UpstreamError(PatchgenError):
    """The upstream module cannot be located or parsed."""


class TargetError(PatchgenError):
    """A patch, exclusion or dropped import does not apply exactly once."""


class SignatureMismatchError(PatchgenError):
    """An override no longer matches the upstream signature it replaces."""


class DocstringError(PatchgenError):
    """An @auto_docstring override declares parameters its docstring omits."""


class DataclassFieldError(PatchgenError):
    """A reused patch constructs an output dataclass with the wrong field set."""


class PatchSourceError(PatchgenError):
    """The source of a patch body cannot be found or is not valid Python."""


class SnippetError(PatchgenError):
    """A snippet is missing, misses a variable or renders to invalid Python."""


class UndefinedNameError(PatchgenError):
    """The output uses names it neither defines nor imports (ruff F821/F811)."""


class ImportRemovedError(PatchgenError):
    """An import requested with add_import would be removed by normalization."""


class OrphanedOutputError(PatchgenError):
    """A generated file exists whose config is gone."""


class NormalizationError(PatchgenError):
    """ruff could not run or failed on the assembled output."""
