"""Token-exact edits: identifier renames and re-indentation that never touch strings or comments.

Both work from ``tokenize`` positions, so a rename changes identifiers only and
re-indenting leaves the inside of string literals byte-for-byte as written.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Mapping
from functools import lru_cache


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def apply_edits(source: str, edits: list[tuple[int, int, int, int, str]]) -> str:
    """Replace ``(row, col, end_row, end_col, text)`` spans (1-based rows) in ``source``."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    out, pos = [], 0
    for row, col, end_row, end_col, text in sorted(edits):
        start, end = offsets[row - 1] + col, offsets[end_row - 1] + end_col
        out.append(source[pos:start])
        out.append(text)
        pos = end
    out.append(source[pos:])
    return "".join(out)


def rename_identifiers(source: str, mapping: Mapping[str, str]) -> str:
    """Rewrite every identifier containing a key of ``mapping`` (e.g. ``Qwen3`` -> ``Qwen3Moe``).

    Keys match inside identifiers (``Qwen3RMSNorm``), longest key first, so a
    prefix rename reaches every class of a model family; strings and comments
    are not identifiers and stay untouched.
    """
    if not mapping:
        return source
    pattern = re.compile("|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True)))
    edits = []
    for tok in _tokens(source):
        if tok.type == tokenize.NAME and pattern.search(tok.string):
            new = pattern.sub(lambda m: mapping[m.group(0)], tok.string)
            edits.append((*tok.start, *tok.end, new))
    return apply_edits(source, edits)


def rename_definition(source: str, new_name: str) -> str:
    """Rename the first ``def``/``class`` statement in ``source`` to ``new_name``."""
    toks = _tokens(source)
    for prev, tok in zip(toks, toks[1:]):
        if prev.type == tokenize.NAME and prev.string in ("def", "class") and tok.type == tokenize.NAME:
            return apply_edits(source, [(*tok.start, *tok.end, new_name)])
    raise ValueError("no def or class statement to rename")


# Only a triple-quoted string, or one continued by a backslash at the end of a line, spans lines.
_MULTI_LINE_STRING_MARKS = ('"""', "'''", "\\\n", "\\\r")


# A pure function of the text, memoised per process: a batch re-indents the same patch (a snippet
# rendered for a model's GPU and NPU configs, a shared helper) once per config that uses it.
@lru_cache(maxsize=256)
def _multi_line_strings(source: str) -> tuple[tuple[int, int], ...]:
    """(first row, last row) of every string literal spanning several lines, from ``tokenize``."""
    if not any(mark in source for mark in _MULTI_LINE_STRING_MARKS):
        return ()  # no string can span lines: most patches are tokenized for nothing otherwise
    return tuple(
        (tok.start[0], tok.end[0])
        for tok in _tokens(source)
        if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]
    )


_DEFINITION_STARTS = ("def", "class", "async", "@")


def before_first_definition(source: str) -> str:
    """The top-level statements of ``source`` ahead of its first top-level ``def``, ``class`` or decorator
    (all of ``source`` when it has none): complete statements, so the text parses on its own.

    Tokenizing stops at that statement, so a module's imports are found without parsing its classes.
    """
    read: list[str] = []
    readline = io.StringIO(source).readline

    def remember() -> str:
        read.append(readline())
        return read[-1]

    line_start = True
    for tok in tokenize.generate_tokens(remember):
        if tok.type == tokenize.NEWLINE:
            line_start = True
        elif tok.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            if line_start and tok.start[1] == 0 and tok.string in _DEFINITION_STARTS:
                return "".join(read[: tok.start[0] - 1])
            line_start = False
    return source


def string_continuation_lines(source: str, *, except_starting_at: set[int] = frozenset()) -> set[int]:
    """1-based rows inside a multi-line string literal (not its first row), except strings starting at the given rows."""
    rows: set[int] = set()
    for first, last in _multi_line_strings(source):
        if first not in except_starting_at:
            rows.update(range(first + 1, last + 1))
    return rows


def reindent(source: str, delta: int, *, docstring_rows: set[int] = frozenset()) -> str:
    """Shift code lines by ``delta`` columns; lines inside string literals keep their bytes.

    Docstrings (whose starting rows are given) move with the code: their
    indentation is not content, and ``inspect.cleandoc`` strips it anyway.
    """
    if delta == 0:
        return source
    frozen = string_continuation_lines(source, except_starting_at=set(docstring_rows))
    out = []
    for row, line in enumerate(source.splitlines(keepends=True), start=1):
        if row in frozen or not line.strip():
            out.append(line if line.strip() or row in frozen else line.lstrip(" \t"))
        elif delta > 0:
            out.append(" " * delta + line)
        else:
            width = len(line) - len(line.lstrip(" "))
            out.append(line[min(width, -delta) :])
    return "".join(out)
