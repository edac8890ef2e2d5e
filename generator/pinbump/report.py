"""The migration report of a trial: per model, what generates, what its tests say, and who must change what.

Written twice from the same records: markdown for the maintainer (``report.md``) and JSON for tools
(``report.json``). Each model's section holds every error of its config with the owner of each (the config
line, snippet, recipe or generator code to change), its tests with the first cause of failure, the
signature changes of its patch targets, and what upstream changed inside the regions its patches touch:
the hunks of its ``.diff`` that differ between the two versions.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from modelgraft.generator.pinbump.model_tests import TestOutcome
from modelgraft.generator.pinbump.survey import Finding

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
_DEFINITION = re.compile(r"^[ +-]\s*(?:async\s+)?(?:class|def)\s+(\w+)")


@dataclass
class ModelReport:
    """One model of the trial."""

    model: str
    config: str
    generated: bool
    errors: list[dict[str, str | None]] = field(default_factory=list)
    tests: TestOutcome | None = None
    signature_changes: list[Finding] = field(default_factory=list)
    #: Hunks of the ``.diff`` that differ between the two versions: where upstream moved under a patch.
    changed_regions: list[str] = field(default_factory=list)

    @property
    def passes(self) -> bool:
        """Generates, and its tests ran with none failing."""
        return self.generated and self.tests is not None and self.tests.failed == 0 and self.tests.passed > 0


@dataclass
class TrialReport:
    """Every model of a trial, and what stopped the trial as a whole (an environment pip could not make)."""

    old: str
    new: str
    models: list[ModelReport]
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passes(self) -> bool:
        return not self.problems and all(model.passes for model in self.models)


def _hunks(diff: str) -> list[str]:
    """A ``.diff``'s hunks without their ``@@`` lines, whose line numbers shift with any upstream edit."""
    hunks: list[list[str]] = []
    for line in diff.splitlines():
        if _HUNK.match(line):
            hunks.append([])
        elif hunks:
            hunks[-1].append(line)
    return ["\n".join(hunk) for hunk in hunks]


def _where(hunk: str) -> str:
    """The first definition a hunk shows, else its first line of code (comments and blank lines skipped)."""
    for line in hunk.splitlines():
        found = _DEFINITION.match(line)
        if found:
            return found[1]
    code = (line[1:].strip() for line in hunk.splitlines())
    return next((text[:60] for text in code if text and not text.startswith("#")), "(comments only)")


def changed_regions(old_diff: str | None, new_diff: str | None) -> list[str]:
    """Where the patched regions changed between two ``.diff`` files: a definition name per changed hunk."""
    if old_diff is None or new_diff is None:
        return []
    old = set(_hunks(old_diff))
    changed = [hunk for hunk in _hunks(new_diff) if hunk not in old]
    return list(dict.fromkeys(_where(hunk) for hunk in changed))


def _status(model: ModelReport) -> str:
    if not model.generated:
        return "does not generate"
    if model.tests is None:
        return "not tested"
    if model.tests.failed:
        return f"{model.tests.failed} test(s) fail"
    return "passes" if model.tests.passed else "no test ran"


def render_markdown(report: TrialReport) -> str:
    """The report a maintainer reads: a table of every model, then one section per model with findings."""
    passing = sum(model.passes for model in report.models)
    lines = [
        f"# Trying transformers {report.new} (pinned: {report.old})",
        "",
        f"{passing} of {len(report.models)} models generate and pass their tests ({report.seconds:.0f} s).",
        "",
    ]
    lines += [f"- **{problem}**" for problem in report.problems]
    owners = Counter(error["owner"] for model in report.models for error in model.errors)
    if owners:
        lines += ["", "## Owners of the errors", "", "| owner | errors |", "|---|---|"]
        lines += [f"| {owner} | {count} |" for owner, count in owners.most_common()]
    lines += [
        "",
        "## Models",
        "",
        "| model | status | tests passed / failed | signature changes |",
        "|---|---|---|---|",
    ]
    for model in report.models:
        tests = f"{model.tests.passed} / {model.tests.failed}" if model.tests else "-"
        lines.append(f"| {model.model} | {_status(model)} | {tests} | {len(model.signature_changes)} |")
    for model in report.models:
        if model.passes and not model.signature_changes and not model.changed_regions:
            continue
        lines += ["", f"### {model.model}", "", f"Config: `{model.config}`. Status: {_status(model)}."]
        if model.errors:
            lines += ["", "Errors:"]
            lines += [
                f"- `{e['type']}`" + (f" on `{e['target']}`" if e["target"] else "") + f" ({e['owner']}): {e['cause']}"
                for e in model.errors
            ]
        if model.tests and model.tests.first_failure:
            lines += ["", f"First failing test: {model.tests.first_failure}"]
        if model.signature_changes:
            # A config that generates under the new version took the change in (its patch follows upstream's
            # signature, e.g. a snippet that re-renders upstream's header); one that does not is broken by it.
            kind = "absorbed" if model.generated else "breaking"
            lines += [
                "",
                f"Signature changes ({kind}: the config {'generates' if model.generated else 'fails'} "
                "under the new version):",
            ]
            lines += [
                f"- {f.status} `{f.target}`" + (f" ({f.owner})" if f.owner else "") + f": {f.detail}"
                for f in model.signature_changes
            ]
        if model.changed_regions:
            lines += ["", "Upstream changed inside patched regions: " + ", ".join(model.changed_regions)]
    return "\n".join(lines) + "\n"


def write_reports(report: TrialReport, folder: Path) -> tuple[Path, Path]:
    """``report.md`` and ``report.json`` in ``folder``; returns both paths."""
    folder.mkdir(parents=True, exist_ok=True)
    markdown, data = folder / "report.md", folder / "report.json"
    markdown.write_text(render_markdown(report), encoding="utf-8")
    payload = asdict(report) | {"passes": report.passes}
    for entry, model in zip(payload["models"], report.models, strict=True):
        entry["passes"] = model.passes
    data.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return markdown, data
