"""Upstream's "generated from modular_<m>.py" banner, found by its comment tokens so the output can leave it out.

transformers generates most modeling files from a ``modular_<m>.py`` and heads each with a banner that
tells readers to edit that modular file instead. In a patched copy the advice is wrong: the file comes
from the source module and the patch config that our own header names (docs/cli.md,
"The header"), and editing transformers' modular file changes nothing here. The banner is
recognised only whole (an opening fence of 🚨, lines naming the modular file, a closing fence) and only
among the comments above the module's first statement, so nothing else upstream wrote is ever dropped.
"""

from __future__ import annotations

import io
import tokenize

__all__ = ["modular_banner_edits", "modular_banner_rows"]

#: The two phrases every line set between the fences must hold between them (transformers' wording).
_BANNER_PHRASES = ("automatically generated from", "modular_")

_FENCE_MARK = "\N{POLICE CARS REVOLVING LIGHT}"


def _is_fence(comment: str) -> bool:
    """``#`` followed by nothing but spaces and 🚨 (at least one): the banner's opening or closing line."""
    marks = comment[1:].strip()
    return bool(marks) and set(marks) == {_FENCE_MARK}


def _leading_comments(source: str) -> list[tokenize.TokenInfo]:
    """The comment tokens above the module's first statement (the tokenizer stops at that statement)."""
    comments = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                comments.append(token)
            elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING):
                break
    except (tokenize.TokenError, SyntaxError):
        return comments  # a module ending inside its comments; upstream is parsed (and refused) elsewhere
    return comments


def modular_banner_rows(source: str) -> tuple[int, int] | None:
    """First and last 1-based rows of upstream's modular banner in ``source``, or None when it has none."""
    comments = [token for token in _leading_comments(source) if token.start[1] == 0]
    for i, opening in enumerate(comments):
        if not _is_fence(opening.string):
            continue
        for j in range(i + 1, len(comments)):
            if comments[j].start[0] != comments[j - 1].start[0] + 1:
                break  # a blank line: the fences do not enclose one block
            if _is_fence(comments[j].string):
                inside = " ".join(token.string for token in comments[i + 1 : j])
                if j > i + 1 and all(phrase in inside for phrase in _BANNER_PHRASES):
                    return opening.start[0], comments[j].start[0]
                break
    return None


def modular_banner_edits(source: str) -> list[tuple[int, int, int, int, str]]:
    """The span edit ``(row, col, end_row, end_col, "")`` that deletes the banner's whole lines; none without one.

    The span ends after the closing fence's line break, so the line that followed the banner (upstream's
    license, as a rule) moves up to where the banner began.
    """
    rows = modular_banner_rows(source)
    if rows is None:
        return []
    first, last = rows
    last_line = source.splitlines(keepends=True)[last - 1]
    return [(first, 0, last, len(last_line), "")]
