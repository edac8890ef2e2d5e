"""Re-indenting upstream's statements for a snippet never changes what they do.

``UpstreamMember`` moves upstream's body to 4 spaces (``body``, ``source``), puts a guard in front of it
(``with_prefix``) or one run of it under ``else:`` (``wrapping``, ``replacing_call``). Every edit is
parsed and compared with upstream's tree, so a line inside a multi-line string, which a re-indent
would change, is refused, naming the member; strings the re-indent leaves alone pass.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from modelgraft.generator.errors import SnippetError
from modelgraft.generator.upstream.index import ModuleIndex
from modelgraft.generator.upstream.member import UpstreamMember

# Shifting the body from 8 to 4 spaces changes the inner lines of this string.
SHIFTED_STRING = '''
class Toy:
    def forward(self, x):
        """Docstring."""
        note = """first
        second"""
        y = self.experts(x)
        return self.head(y), note
'''

# The string's inner line is left of the body, where a re-indent leaves it.
SAFE_STRING = '''
class Toy:
    def forward(self, x):
        note = """first
second"""
        y = self.experts(x)
        return self.head(y), note
'''

# The string is part of the statement that goes under ``else:``, 4 spaces deeper.
STRING_IN_THE_RUN = '''
def forward(x):
    y = experts(x, """a
    b""")
    return y
'''

PLAIN = '''
class Toy:
    def forward(self, x):
        """Docstring."""
        y = self.experts(x)  # comment
        return self.head(
            y,
        )
'''


def _member(source: str, qualname: str = "Toy.forward") -> UpstreamMember:
    tree = ast.parse(source)
    index = ModuleIndex(module="toy", path=Path("toy.py"), source=source, tree=tree)
    for node in tree.body:
        index.members[node.name] = node
    cls, _, method = qualname.rpartition(".")
    node = index.method(cls, method) if cls else index.members[method]
    return UpstreamMember(index, node, qualname)


GUARD = "if slot.use_non_eager_impl:\n    return slot(x)\n"


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.body,
        lambda m: m.source,
        lambda m: m.with_prefix(GUARD),
        # The run is one statement; the string sits in a statement around it.
        lambda m: m.wrapping("self.experts", "slot.use_non_eager_impl", "y = slot(x)\n"),
        lambda m: m.replacing_call("self.head", "slot.use_non_eager_impl", "slot(y)"),
    ],
    ids=["body", "source", "with_prefix", "wrapping", "replacing_call"],
)
def test_an_edit_that_changes_a_multi_line_string_is_refused(edit) -> None:
    with pytest.raises(SnippetError, match=r"upstream Toy.forward \(line 3 of toy.py\): its body changes"):
        edit(_member(SHIFTED_STRING))


def test_a_run_holding_a_multi_line_string_cannot_go_under_else() -> None:
    member = _member(STRING_IN_THE_RUN, "forward")

    assert member.body  # at its own indentation the body is fine
    with pytest.raises(SnippetError, match="its statements change when re-indented under the guard"):
        member.wrapping("experts", "slot.use_non_eager_impl", "y = slot(x)\n")


def test_strings_the_re_indent_leaves_alone_pass() -> None:
    member = _member(SAFE_STRING)

    guarded = member.with_prefix(GUARD).wrapping("self.experts", "slot.use_non_eager_impl", "y = slot(x)\n")

    assert '    note = """first\nsecond"""\n' in guarded.source


def test_edits_keep_upstreams_statements_and_comments() -> None:
    member = _member(PLAIN)

    guarded = member.with_prefix(GUARD).replacing_call("self.head", "slot.use_non_eager_impl", "slot(y)")

    assert guarded.source == (
        "def forward(self, x):\n"
        '    """Docstring."""\n'
        "    if slot.use_non_eager_impl:\n"
        "        return slot(x)\n"
        "    y = self.experts(x)  # comment\n"
        "    if slot.use_non_eager_impl:\n"
        "        return slot(y)\n"
        "    else:\n"
        "        return self.head(\n"
        "            y,\n"
        "        )\n"
    )
    assert guarded.call("self.experts").args == ("x",)


def test_a_guard_that_is_not_python_is_named_as_an_edit() -> None:
    with pytest.raises(SnippetError, match=r"an edit produced invalid Python"):
        _member(PLAIN).with_prefix("if slot:\nreturn x\n")


# The run sits two blocks deep; the string sits beside the block that holds it.
NESTED = '''
class Toy:
    def forward(self, x):
        note = """first
        second"""
        for layer in self.layers:
            try:
                y = self.experts(x)
            except ValueError:
                y = layer(x)
        return y, note
'''


def test_a_statement_beside_a_nested_run_that_changes_is_refused() -> None:
    member = _member(NESTED)

    with pytest.raises(SnippetError, match="its body changes when re-indented"):
        member.wrapping("self.experts", "slot.use_non_eager_impl", "y = slot(x)\n")


def test_a_run_in_an_except_clause_goes_under_else_in_place() -> None:
    member = _member(NESTED.replace('"""first\n        second"""', '"one line"'))

    guarded = member.wrapping("layer", "slot.use_non_eager_impl", "y = slot(x)\n")

    assert (
        "        except ValueError:\n"
        "            if slot.use_non_eager_impl:\n"
        "                y = slot(x)\n"
        "            else:\n"
        "                y = layer(x)\n"
    ) in guarded.source


@pytest.fixture
def parsed(monkeypatch) -> list[str]:
    """Every text parsed from now on (through the parse memo, as every edit and verification is)."""
    from modelgraft.generator import parse_cache

    texts: list[str] = []
    real = parse_cache.parse
    monkeypatch.setattr(parse_cache, "parse", lambda text: texts.append(text) or real(text))
    return texts


def test_wrapping_parses_the_edited_function_once_and_nothing_else(parsed) -> None:
    member = _member(PLAIN)
    parsed.clear()

    guarded = member.wrapping("self.experts", "slot.use_non_eager_impl", "y = slot(x)\n")

    assert parsed == [guarded.index.source]


def test_a_body_already_at_four_spaces_is_its_trees_own_text_and_is_not_parsed_again(parsed) -> None:
    derived = _member(PLAIN).with_prefix(GUARD)
    parsed.clear()

    assert derived.source == derived.index.source
    assert parsed == []


def test_a_body_at_four_spaces_with_a_blank_line_of_spaces_is_still_verified(parsed) -> None:
    member = _member("def forward(x):\n    y = x\n    \n    return y\n", "forward")

    assert member.body == "    y = x\n\n    return y\n"
    assert parsed == ["def _():\n    y = x\n\n    return y\n"]
