"""Progress over the selected configs and the closing summary of ``generate-all``.

On a terminal (stderr is a TTY and ``CI`` is unset) a rich progress bar counts the configs as they are
loaded, generated and written; elsewhere nothing is drawn, so CI logs hold only the plain lines.
``-q`` turns both the bar and the summary off.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import AbstractContextManager
from types import TracebackType


def interactive() -> bool:
    """Whether progress may be drawn: stderr is a terminal and this is not a CI run."""
    return sys.stderr.isatty() and not os.environ.get("CI")


class Progress(AbstractContextManager["Progress"]):
    """One bar over ``total`` configs, re-labelled per phase; a no-op where it must not draw."""

    def __init__(self, *, quiet: bool = False, draw: bool | None = None) -> None:
        self.quiet = quiet
        self.draw = (interactive() if draw is None else draw) and not quiet
        self.started = time.perf_counter()
        self._bar = None
        self._task = None

    def __enter__(self) -> Progress:
        if self.draw:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, value, tb)
            self._bar = None

    def phase(self, description: str, total: int) -> None:
        """Start counting ``total`` steps (configs) under ``description``."""
        if self._bar is None:
            return
        if self._task is None:
            self._task = self._bar.add_task(description, total=total)
        else:
            self._bar.reset(self._task, description=description, total=total)

    def advance(self, steps: int = 1) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, steps)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def summary(self, line: str) -> None:
        """The one closing line (stdout), unless quiet."""
        if not self.quiet:
            print(line)
