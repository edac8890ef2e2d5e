"""``UpstreamMember.replacing_calls``: a module upstream calls in several statements, each guarded alone.

OPT's decoder layer calls each layer norm twice, once on each side of ``if self.do_layer_norm_before``; the
guard puts each of those statements behind the slot, keeps it as upstream wrote it under ``else:``, and is
verified as a whole (every new guard replaced by its ``else:`` branch gives upstream's function back).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from modelgraft.generator.errors import SnippetError
from modelgraft.generator.upstream.index import ModuleIndex
from modelgraft.generator.upstream.member import UpstreamMember

CONDITION = "slot.use_non_eager_impl"

TWO_SIDES = '''
class Layer:
    def forward(self, x):
        """Docstring."""
        if self.before:
            x = self.norm(x)
        y = self.block(x)
        if not self.before:
            y = self.norm(y)  # after the block
        return y
'''

ONE_STATEMENT_TWICE = """
class Layer:
    def forward(self, x):
        y = self.norm(x) + self.norm(x * 2)
        return y
"""

# The string's inner line is left of the body, where moving the body to 4 spaces leaves it, but not left of the
# statement once that is at 4 spaces: putting the statement under the guard would move it.
STRING_UNDER_THE_GUARD = '''
class Layer:
    def forward(self, x):
        x = self.norm(x)
        y = self.norm("""a
    b""")
        return y
'''


def _member(source: str) -> UpstreamMember:
    tree = ast.parse(source)
    index = ModuleIndex(module="toy", path=Path("toy.py"), source=source, tree=tree)
    for node in tree.body:
        index.members[node.name] = node
    return UpstreamMember(index, index.method("Layer", "forward"), "Layer.forward")


def test_each_statement_calling_the_module_goes_behind_the_guard_alone() -> None:
    member = _member(TWO_SIDES)

    guarded = member.replacing_calls("self.norm", CONDITION, ["slot(x, 1)", "slot(y, 2)"])

    assert guarded.source == (
        "def forward(self, x):\n"
        '    """Docstring."""\n'
        "    if self.before:\n"
        "        if slot.use_non_eager_impl:\n"
        "            x = slot(x, 1)\n"
        "        else:\n"
        "            x = self.norm(x)\n"
        "    y = self.block(x)\n"
        "    if not self.before:\n"
        "        if slot.use_non_eager_impl:\n"
        "            y = slot(y, 2)  # after the block\n"
        "        else:\n"
        "            y = self.norm(y)  # after the block\n"
        "    return y\n"
    )


def test_the_calls_are_read_in_source_order() -> None:
    assert [site.args for site in _member(TWO_SIDES).calls("self.norm")] == [("x",), ("y",)]


def test_guards_on_the_same_condition_made_before_are_kept() -> None:
    member = _member(TWO_SIDES).replacing_call("self.block", CONDITION, "slot(x)")

    guarded = member.replacing_calls("self.norm", CONDITION, ["slot(x, 1)", "slot(y, 2)"])

    assert guarded.source.count(f"if {CONDITION}:") == 3
    assert "        y = slot(x)\n    else:\n        y = self.block(x)\n" in guarded.source


def test_a_statement_calling_the_module_twice_is_refused() -> None:
    with pytest.raises(SnippetError, match=r"upstream Layer.forward .*: one statement calls self.norm\(...\) more"):
        _member(ONE_STATEMENT_TWICE).replacing_calls("self.norm", CONDITION, ["slot(x)", "slot(x * 2)"])


def test_a_replacement_for_each_call_is_required() -> None:
    with pytest.raises(SnippetError, match=r"2 calls of self.norm\(...\) and 1 replacements"):
        _member(TWO_SIDES).replacing_calls("self.norm", CONDITION, ["slot(x)"])


def test_a_module_the_body_never_calls_is_refused() -> None:
    with pytest.raises(SnippetError, match=r"it calls no self.head\(...\)"):
        _member(TWO_SIDES).replacing_calls("self.head", CONDITION, [])


def test_a_statement_that_changes_when_re_indented_is_refused() -> None:
    with pytest.raises(SnippetError, match="its statements change when re-indented under the guards"):
        _member(STRING_UNDER_THE_GUARD).replacing_calls("self.norm", CONDITION, ["slot(x)", "slot(x)"])
