"""Reading the runnable examples out of docs/*.md.

Convention (described in docs/dsl.md): an HTML comment right before a fenced
code block marks it as an example::

    <!-- example: GROUPS PATH -->          generated; must succeed
    <!-- example-error: GROUPS PATH -->    must fail; the next ```text block is the expected message

GROUPS is a comma-separated list of group names: the blocks of one group form
one throwaway project, and blocks of one group and one PATH are concatenated in
order. PATH is where the block goes, as it would in this repository:
``models/<m>/<file>.py`` (a config; written under ``zoo/`` in the project, with
``models.<m>.`` imports between the group's own configs rewritten to ``zoo.<m>.``)
or ``generator/snippets/<name>.py.j2`` (a snippet template for the run).
In an expected message, ``...`` matches any text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"

_MARKER = re.compile(r"^[ \t]*<!--\s*(example|example-error):\s*(\S+)\s+(\S+)\s*-->[ \t]*$", re.MULTILINE)
_FENCE = re.compile(r"\s*^([ \t]*)```([\w-]*)[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Example:
    doc: str
    line: int
    groups: tuple[str, ...]
    path: str
    code: str
    expected_error: str | None

    @property
    def where(self) -> str:
        return f"docs/{self.doc}:{self.line}"


def _fence_at(text: str, pos: int, where: str) -> tuple[str, str, int]:
    """The fenced block that starts at ``pos`` (after blank lines): (language, body, end)."""
    match = _FENCE.match(text, pos)
    if match is None:
        raise ValueError(f"{where}: an example marker must be followed by a fenced code block")
    indent, language, body = match.groups()
    lines = body.splitlines(keepends=True)
    body = "".join(line.removeprefix(indent) for line in lines)
    return language, body, match.end()


def examples(doc: str) -> list[Example]:
    """Every marked example of ``docs/<doc>``, in document order."""
    text = (DOCS / doc).read_text(encoding="utf-8")
    found = []
    for marker in _MARKER.finditer(text):
        kind, groups, path = marker.groups()
        line = text.count("\n", 0, marker.start()) + 1
        where = f"docs/{doc}:{line}"
        language, code, end = _fence_at(text, marker.end(), where)
        if path.endswith(".py") and language != "python":
            raise ValueError(f"{where}: a config example must be a ```python block, not {language!r}")
        expected = None
        if kind == "example-error":
            language, expected, _ = _fence_at(text, end, where)
            if language != "text":
                raise ValueError(f"{where}: an example-error block must be followed by a ```text block")
            expected = expected.strip()
        found.append(Example(doc, line, tuple(groups.split(",")), path, code, expected))
    return found


def groups(doc: str) -> dict[str, list[Example]]:
    out: dict[str, list[Example]] = {}
    for example in examples(doc):
        for group in example.groups:
            out.setdefault(group, []).append(example)
    return out


def message_pattern(expected: str) -> re.Pattern[str]:
    """``expected`` as a full-match pattern in which ``...`` stands for any text."""
    return re.compile(".*?".join(re.escape(part) for part in expected.split("...")), re.DOTALL)
