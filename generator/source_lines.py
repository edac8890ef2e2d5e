"""One source text split into lines once, so ``ast`` positions turn into text without re-splitting it.

``ast.get_source_segment`` splits the whole source again on every call; the generator asks for
hundreds of segments (call arguments, statements) of the same upstream file of a few thousand lines,
and that splitting was the largest single cost of a run. A :class:`SourceLines` splits once, keeps
each line's start offset, and answers every later question by slicing.

Lines are split where the parser splits them (``\\r\\n``, ``\\n``, ``\\r``), not where
``str.splitlines`` does (which also breaks at form feeds, ``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028``
and ``\\u2029``): a node's ``lineno`` must name the same line here as in the tree.
"""

from __future__ import annotations

import ast
from itertools import accumulate

_PARSER_LINE_ENDS = ("\n", "\r")


def parser_lines(text: str) -> list[str]:
    """``text`` split into lines as the parser numbers them, line ends kept."""
    lines: list[str] = []
    pending = ""
    for piece in text.splitlines(keepends=True):
        if piece.endswith(_PARSER_LINE_ENDS):
            lines.append(pending + piece)
            pending = ""
        else:  # broken at a character the parser reads as part of the line
            pending += piece
    if pending:
        lines.append(pending)
    return lines


class SourceLines:
    """Lines and line start offsets of one source text; ``ast`` positions (1-based lines, UTF-8 byte
    columns) to character offsets and text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = parser_lines(text)
        self._starts = list(accumulate((len(line) for line in self.lines), initial=0))
        # Byte columns are character columns when every character is one byte.
        self._ascii = text.isascii()

    def offset(self, lineno: int, col_offset: int) -> int:
        """Character offset in ``text`` of the position ``lineno`` (1-based), ``col_offset`` (UTF-8 bytes)."""
        start = self._starts[lineno - 1]
        if self._ascii or not col_offset:  # (line ``len(lines) + 1``, column 0 is the end of the text)
            return start + col_offset
        return start + len(self.lines[lineno - 1].encode("utf-8")[:col_offset].decode("utf-8"))

    def segment(self, node: ast.AST) -> str | None:
        """The text of ``node``: what ``ast.get_source_segment(text, node)`` returns, without re-splitting."""
        end_lineno = getattr(node, "end_lineno", None)
        end_col_offset = getattr(node, "end_col_offset", None)
        if end_lineno is None or end_col_offset is None:
            return None
        return self.text[self.offset(node.lineno, node.col_offset) : self.offset(end_lineno, end_col_offset)]
