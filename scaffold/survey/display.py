"""Progress on stderr while the survey runs: a rich bar on a terminal, else one plain line per model."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from modelgraft.scaffold.survey.classify import BROKEN, PASS, REFUSED, WRONG, ModelResult
from modelgraft.scaffold.survey.tables import model_line


class Display:
    """A rich progress bar on a terminal, else one plain line per model (both on stderr)."""

    def __init__(self, total: int, *, tty: bool) -> None:
        self.total = total
        self.done = 0
        self.tty = tty
        self._progress = None
        if tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("[bold]scaffold-survey"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.description}"), console=Console(stderr=True),
            )  # fmt: skip
            self._task = self._progress.add_task("", total=total)

    def __enter__(self) -> Display:  # noqa: PYI034
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def message(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=sys.stderr, flush=True)

    def started(self, running: Sequence[str]) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=", ".join(running))

    def finished(self, result: ModelResult) -> None:
        self.done += 1
        line = model_line(result, self.done, self.total)
        if self._progress is not None:
            colour = {PASS: "green", REFUSED: "yellow", BROKEN: "red", WRONG: "red"}[result.outcome]
            from rich.text import Text

            text = Text(line)
            text.highlight_words([f": {result.outcome} in"], style=colour)
            self._progress.console.print(text)
            self._progress.advance(self._task)
        else:
            print(line, file=sys.stderr, flush=True)
