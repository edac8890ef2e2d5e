"""One typed hierarchy for every user-facing failure of the generator.

Every check raises a subclass of :class:`PatchgenError`; only the console-script handler
(``modelgraft.generator.entrypoint``) turns them into messages and exit status 2.  Each error names the config,
the target and the cause, so a failing CI log is actionable without re-running locally.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input to any console script of the project: its message is for the user, and exit status 2.

    The base of :class:`PatchgenError` and of the scaffold tools' errors, so that one handler tells
    every tool's bad input from its bugs.
    """


class PatchgenError(UserError):
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


class PatchApiError(PatchgenError, ValueError):
    """A config calls the patch API wrongly; the message ends with the file and line of that call.

    Raised while the config module is imported, from inside ``modelgraft.generator.dsl``: the location is the
    config's line that made the call (or called the recipe that made it), never a line of the DSL.
    A ``ValueError`` too, as these misuses were before they had a type of their own.
    """

    def __init__(
        self, cause: str, *, config: str | None = None, target: str | None = None, location: str | None = None
    ) -> None:
        self.location = location
        super().__init__(cause, config=config, target=target)

    def format(self, config_file: str | None = None) -> str:
        text = super().format()
        return f"{text} ({self.location})" if self.location else text

    def __reduce__(self):
        return (_rebuild_api_error, (self.cause, self.config, self.target, self.location))

    def with_context(self, *, config: str | None = None, target: str | None = None) -> PatchApiError:
        return PatchApiError(
            self.cause, config=self.config or config, target=self.target or target, location=self.location
        )


def _rebuild_api_error(cause: str, config: str | None, target: str | None, location: str | None) -> PatchApiError:
    return PatchApiError(cause, config=config, target=target, location=location)


class CollectedErrors(PatchgenError):
    """Several configs failed: a run goes on past each failure and reports every one of them together.

    After a pin bump many configs fail at once, each for its own reasons; a run that stopped at the first
    would show them one round at a time. ``errors`` keeps each error with its own config and target.
    """

    def __init__(self, errors: list[PatchgenError] | tuple[PatchgenError, ...]) -> None:
        self.errors = tuple(errors)
        configs = {error.config for error in self.errors}
        super().__init__(f"{len(self.errors)} errors in {len(configs)} config(s)")

    def format(self, config_file: str | None = None) -> str:
        return self.cause + "".join(f"\n  {error.format()}" for error in self.errors)

    def __reduce__(self):
        return (CollectedErrors, (self.errors,))

    def with_context(self, *, config: str | None = None, target: str | None = None) -> CollectedErrors:
        return self


def collected(errors: list[PatchgenError]) -> PatchgenError:
    """The one error to raise for ``errors`` (at least one): itself when alone, else all of them together."""
    flat = [inner for error in errors for inner in (error.errors if isinstance(error, CollectedErrors) else (error,))]
    return flat[0] if len(flat) == 1 else CollectedErrors(flat)


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


class DuplicateOutputError(PatchgenError):
    """Two configs generate the same code (their outputs differ in the header only): one file would do."""
