"""Re-indenting leaves the inside of every multi-line string alone, however the string spans lines."""

from __future__ import annotations

import pytest

from modelgraft.generator.codegen.tokens import reindent, string_continuation_lines

SOURCES = {
    "triple-quoted": ('def f():\n    x = """a\n  b\n"""\n    return x\n', {3, 4}),
    "backslash-continued": ("def f():\n    x = 'a\\\n  b'\n    return x\n", {3}),
    "implicit concatenation": ("def f():\n    x = ('a'\n         'b')\n    return x\n", set()),
    "no strings": ("def f(x):\n    return x\n", set()),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_rows_inside_strings_are_found_and_kept(name: str) -> None:
    source, rows = SOURCES[name]

    assert string_continuation_lines(source) == rows
    shifted = reindent(source, 4).splitlines()
    for row, line in enumerate(source.splitlines(), start=1):
        assert shifted[row - 1] == (line if row in rows else "    " + line)
