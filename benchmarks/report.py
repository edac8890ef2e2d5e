"""The results table: one row per measurement, budgets judged as met or missed, rendered as Markdown.

Statuses are words, not colours, so the table reads the same in a terminal, a CI log and a file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MET = "met"
MET_WITHIN_NOISE = "met (within noise)"
MISSED = "MISSED"
FAILED = "FAILED"
INFO = "info"
SKIPPED = "skipped"

#: Statuses that make ``run.py --strict`` exit non-zero.
BAD_STATUSES = frozenset({MISSED, FAILED})

COLUMNS = ("section", "measurement", "result", "spread", "budget", "status", "notes")


@dataclass(frozen=True)
class Row:
    """One line of the table; ``budget`` is empty for context measurements (status ``info``)."""

    section: str
    measurement: str
    result: str
    spread: str = ""
    budget: str = ""
    status: str = INFO
    notes: str = ""


def judge_at_most(value: float, limit: float, *, noise: float = 0.0) -> str:
    """``met`` if ``value <= limit``, ``met (within noise)`` if within ``noise`` above it, else ``MISSED``."""
    if value <= limit:
        return MET
    if value <= limit + noise:
        return MET_WITHIN_NOISE
    return MISSED


def judge_at_least(value: float, floor: float, *, noise: float = 0.0) -> str:
    """``met`` if ``value >= floor``, ``met (within noise)`` if within ``noise`` below it, else ``MISSED``."""
    if value >= floor:
        return MET
    if value >= floor - noise:
        return MET_WITHIN_NOISE
    return MISSED


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(rows: Sequence[Row]) -> str:
    """A Markdown table of ``rows``."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for row in rows:
        cells = (row.section, row.measurement, row.result, row.spread, row.budget, row.status, row.notes)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def render_report(title: str, preamble: Iterable[str], rows: Sequence[Row]) -> str:
    """The whole file: title, machine/command lines, the table, and a budget verdict line."""
    judged = [r for r in rows if r.budget]
    bad = [r for r in rows if r.status in BAD_STATUSES]
    verdict = f"{len(judged) - len([r for r in judged if r.status in BAD_STATUSES])}/{len(judged)} budgets met" + (
        f"; not met or failed: {', '.join(f'{r.section}: {r.measurement}' for r in bad)}" if bad else ""
    )
    parts = [f"# {title}", "", *[f"- {line}" for line in preamble], "", render_table(rows), "", verdict, ""]
    return "\n".join(parts)
