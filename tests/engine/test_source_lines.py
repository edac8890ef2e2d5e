"""SourceLines answers what ``ast.get_source_segment`` answers, from one split of the source."""

from __future__ import annotations

import ast
import functools

import pytest

from modelgraft.generator.source_lines import SourceLines, parser_lines
from modelgraft.generator.upstream.locate import module_path

# Non-ASCII text before nodes on the same line (byte columns differ from character columns), a form
# feed and the other characters str.splitlines breaks at but the parser does not, CRLF and CR ends.
AWKWARD = (
    'def f(x):\r\n    s = "é\u2028ü" + g(x, "日本")\r\n'
    "    \x0c\n"
    "    t = (\n        'a\x1cb', x)\r"
    '    return s, t, """multi\nline""", h(ä=1)\n'
)


def _nodes(tree: ast.AST) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if getattr(n, "end_col_offset", None) is not None]


def test_lines_are_numbered_as_the_parser_numbers_them() -> None:
    lines = parser_lines(AWKWARD)

    assert "".join(lines) == AWKWARD
    assert len(lines) == 7
    assert lines[1] == '    s = "é\u2028ü" + g(x, "日本")\r\n'
    assert lines[3] == "    t = (\n"


@pytest.mark.parametrize(
    "text", [AWKWARD, "x = 1", "", "a = [\n  1,\n]\n"], ids=["awkward", "no-newline", "empty", "plain"]
)
def test_every_segment_equals_get_source_segment(text: str) -> None:
    tree = ast.parse(text)
    lines = SourceLines(text)

    for node in _nodes(tree):
        assert lines.segment(node) == ast.get_source_segment(text, node), ast.dump(node)


def test_every_segment_of_an_upstream_module_equals_get_source_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    text = module_path("transformers.models.llama.modeling_llama").read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = SourceLines(text)
    # The reference re-splits the whole file on every call, the cost SourceLines exists to avoid: its own
    # splitting, memoized (a pure function of the text), keeps it the reference at a linear cost.
    monkeypatch.setattr(ast, "_splitlines_no_ff", functools.lru_cache(maxsize=1)(ast._splitlines_no_ff))

    nodes = _nodes(tree)
    assert len(nodes) > 1000
    for node in nodes:
        assert lines.segment(node) == ast.get_source_segment(text, node)


def test_a_node_without_end_positions_has_no_segment() -> None:
    assert SourceLines("x = 1\n").segment(ast.Name(id="x", lineno=1, col_offset=0)) is None


def test_a_patch_body_after_a_form_feed_is_cut_at_its_own_lines() -> None:
    from modelgraft.generator.codegen.patch_source import from_text

    source = from_text("import os\n\x0c# section\ndef f():\n    return os.sep\n", origin="snippet s")

    assert source.text == "def f():\n    return os.sep\n"
