"""Everything one generation run knows besides its configs: settings, parsed sources, caches.

The CLI creates one per run and hands it down (``pipeline.generate`` -> ``prepare`` -> planning),
so a run never sees what an earlier run in the same process parsed, and no module keeps run state.
It pickles for the process pool as its settings alone: a worker starts with empty caches and fills
its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelgraft.generator.codegen.patch_source import ParsedFiles
from modelgraft.generator.discovery import Settings
from modelgraft.generator.upstream.index import UpstreamSources
from modelgraft.generator.upstream.locate import distribution_version

if TYPE_CHECKING:
    import jinja2


@dataclass
class RunContext:
    """Settings of one run and what it has read so far.

    ``sources`` also records which upstream files were consulted (``sources.accessed``); ``prepare``
    clears that record per config, since those files are that config's inputs for the check cache.
    """

    settings: Settings
    # Worker processes; None: one per core, at most one per config.
    jobs: int | None = None
    sources: UpstreamSources = field(default_factory=UpstreamSources)
    #: The version of the upstream ``sources`` read, when they are an unpacked reference tree of another
    #: version (``patchgen-pin try``); None: the installed distribution's.
    upstream_version: str | None = None
    # Config (and helper) files that patch bodies were cut from, parsed once per run.
    config_files: ParsedFiles = field(default_factory=dict)
    _templates: jinja2.Environment | None = field(default=None, repr=False)

    @property
    def templates(self) -> jinja2.Environment:
        """The snippet templates, loaded on first use (a run without snippets never imports jinja)."""
        if self._templates is None:
            from modelgraft.generator import snippets

            self._templates = snippets.environment()
        return self._templates

    def version_of(self, top_level: str) -> str:
        """The version of upstream package ``top_level`` that this run generates against (the header's)."""
        if self.upstream_version is not None and self.sources.root is not None:
            return self.upstream_version
        return distribution_version(top_level)

    def begin_config(self) -> set[Path]:
        """Start recording the upstream files one config consults; returns the (live) record."""
        self.sources.accessed.clear()
        return self.sources.accessed

    def __getstate__(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "jobs": self.jobs,
            "root": self.sources.root,
            "version": self.upstream_version,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["settings"], state["jobs"], UpstreamSources(state["root"]), upstream_version=state["version"]
        )
