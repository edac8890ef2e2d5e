"""The survey's report: a summary per category with the pass-rate targets, and the per-model results.

Three formats of the same tables: Markdown (docs/scaffolding.md, "How far the scaffold reaches"),
aligned plain text for a log, and a rich table on a terminal; JSON holds every result.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

from modelgraft.scaffold.survey.categories import category_label, category_names, category_target
from modelgraft.scaffold.survey.classify import BROKEN, OUTCOMES, PASS, REFUSED, WRONG, ModelResult, headline


def category_order(categories: Iterable[str]) -> list[str]:
    """The categories in the reader's order, unknown ones after them."""
    known = [c for c in category_names() if c in set(categories)]
    return known + sorted(set(categories) - set(category_names()))


def summarize(results: Sequence[ModelResult]) -> list[dict]:
    """One row per category, then the total: the counts of each outcome and the pass rate."""
    rows = []
    groups: dict[str, list[ModelResult]] = {}
    for result in results:
        groups.setdefault(result.category, []).append(result)
    for category in [*category_order(groups), "total"]:
        members = list(results) if category == "total" else groups[category]
        row = {"category": category, "models": len(members)}
        row.update({outcome: sum(1 for r in members if r.outcome == outcome) for outcome in OUTCOMES})
        row["pass_rate"] = row[PASS] / len(members) if members else 0.0
        row["target"] = category_target(category)
        rows.append(row)
    return rows


def _rate(row: dict) -> str:
    return f"{100 * row['pass_rate']:.0f}%" if row["models"] else "-"


def _target(row: dict) -> str:
    if row["target"] is None:
        return ""
    met = "met" if row["models"] and row["pass_rate"] >= row["target"] else "not met"
    return f"≥ {100 * row['target']:.0f}% ({met})"


def _label(category: str) -> str:
    return category_label(category)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_tables(results: Sequence[ModelResult], *, width: int = 160, caption: str | None = None) -> str:
    """The summary and the per-model results as Markdown tables (for docs/scaffolding.md)."""
    out = [caption, ""] if caption else []
    out += [
        "| category | models | pass | refused | broken | wrong | pass rate | target |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in summarize(results):
        name = "**total**" if row["category"] == "total" else _label(row["category"])
        out.append(
            f"| {name} | {row['models']} | {row[PASS]} | {row[REFUSED]} | {row[BROKEN]} | {row[WRONG]} "
            f"| {_rate(row)} | {_target(row)} |"
        )
    out += ["", "| model | category | outcome | slots guarded | reason |", "|---|---|---|---|---|"]
    for result in sorted(
        results, key=lambda r: (category_order([r.category, *category_names()]).index(r.category), r.model)
    ):
        slots = ", ".join(f"`{s}`" for s in result.slots)
        out.append(
            f"| `{result.model}` | {_label(result.category)} | {result.outcome} | {slots} "
            f"| {_md_cell(_reason(result, width))} |"
        )
    return "\n".join(out) + "\n"


def _reason(result: ModelResult, width: int) -> str:
    """The reason's headline, then what the copy with the refusal's text answer did (not in the counts)."""
    text = headline(result.reason, width)
    return f"{text}; {result.text_answer.describe()}" if result.text_answer is not None else text


def plain_tables(results: Sequence[ModelResult]) -> str:
    """The summary as aligned text, then every model that did not pass with its reason."""
    header = ("category", "models", "pass", "refused", "broken", "wrong", "pass rate", "target")
    rows = [header]
    for row in summarize(results):
        rows.append((_label(row["category"]), str(row["models"]), str(row[PASS]), str(row[REFUSED]),
                     str(row[BROKEN]), str(row[WRONG]), _rate(row), _target(row)))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    failures = [r for r in results if r.outcome != PASS]
    if failures:
        lines += ["", "not passing:"]
        for r in sorted(failures, key=lambda r: (OUTCOMES.index(r.outcome), r.model)):
            lines.append(f"  {r.model} [{_label(r.category)}] {r.outcome}: {_reason(r, 200)}")
    return "\n".join(lines) + "\n"


def rich_summary(results: Sequence[ModelResult]):  # -> rich.table.Table
    """The summary as a rich table, for a terminal."""
    from rich.table import Table

    table = Table(title="scaffold-survey")
    for column in ("category", "models", "pass", "refused", "broken", "wrong", "pass rate", "target"):
        table.add_column(column, justify="left" if column in ("category", "target") else "right")
    for row in summarize(results):
        style = "bold" if row["category"] == "total" else None
        table.add_row(_label(row["category"]), str(row["models"]), str(row[PASS]), str(row[REFUSED]),
                      str(row[BROKEN]), str(row[WRONG]), _rate(row), _target(row), style=style)  # fmt: skip
    return table


def exit_code(results: Sequence[ModelResult]) -> int:
    """The shared table's status (``modelgraft.generator.entrypoint.ExitStatus``): findings (1) when a model is
    broken or wrong, or the copy its refusal's text answer leads to is, else ok (0)."""
    # Imported here: importing the survey loads nothing of the generator.
    from modelgraft.generator.entrypoint import ExitStatus

    outcomes = [r.outcome for r in results] + [r.text_answer.outcome for r in results if r.text_answer is not None]
    return ExitStatus.FINDINGS if any(outcome in (BROKEN, WRONG) for outcome in outcomes) else ExitStatus.OK


def model_line(result: ModelResult, done: int, total: int) -> str:
    """One model's progress line: its outcome, time, slots and reason."""
    slots = ",".join(result.slots) or "-"
    text = f"[{done}/{total}] {result.model} ({_label(result.category)}): {result.outcome} in {result.seconds:.1f} s"
    text += f"; slots: {slots}"
    if result.reason:
        text += f"; {_reason(result, 240)}"
    return text


def write_json(path: Path, results: Sequence[ModelResult], meta: dict) -> None:
    """Every result, the summary and ``meta`` (how the survey ran) as JSON at ``path``."""
    payload = {
        **meta,
        "summary": summarize(results),
        "results": [asdict(r) | {"slots": list(r.slots)} for r in results],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
