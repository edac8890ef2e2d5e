"""The one-walk search for a call's statement finds what searching statement by statement found."""

from __future__ import annotations

import ast

import pytest

from modelgraft.generator.syntax import FUNCTION_NODES
from modelgraft.generator.upstream.locate import module_path
from modelgraft.generator.upstream.member import _callee, _owned_calls, _statement_lists

MODULES = ("transformers.models.deepseek_v4.modeling_deepseek_v4", "transformers.models.gpt_oss.modeling_gpt_oss")

TRICKY = """
def f(self, x=g()):
    try:
        y = g(g(x))
    except g() as e:
        g()
    match x:
        case 1:
            g()
    for i in g():
        if g():
            g()
        else:
            while g():
                g()
    return g()
"""


def _reference(root: ast.AST, pattern: str) -> list[tuple[ast.stmt, ast.Call]]:
    """Statement by statement: its calls, less those that sit in a statement nested inside it."""

    def calls(node: ast.AST, name: str) -> list[ast.Call]:
        return [n for n in ast.walk(node) if isinstance(n, ast.Call) and _callee(n) == name]

    def nested(statement: ast.stmt, call: ast.Call) -> bool:
        return any(call in calls(inner, _callee(call)) for block in _statement_lists(statement) for inner in block)

    found = []
    for block in _statement_lists(root):
        for statement in block:
            if not isinstance(statement, ast.excepthandler):
                found += [(statement, c) for c in calls(statement, pattern) if not nested(statement, c)]
    return found


def _key(pairs: list[tuple[ast.stmt, ast.Call]]) -> set[tuple[int, int]]:
    return {(id(statement), id(call)) for statement, call in pairs}


@pytest.mark.parametrize("module", [None, *MODULES], ids=["tricky", "deepseek_v4", "gpt_oss"])
def test_every_call_has_the_owner_the_statement_by_statement_search_gives(module: str | None) -> None:
    tree = ast.parse(TRICKY if module is None else module_path(module).read_text(encoding="utf-8"))
    functions = [n for n in ast.walk(tree) if isinstance(n, FUNCTION_NODES)]
    checked = 0
    for function in functions:
        for pattern in {_callee(c) for c in ast.walk(function) if isinstance(c, ast.Call)}:
            owned = _owned_calls(function, pattern)
            assert len(owned) == len(_key(owned)) and _key(owned) == _key(_reference(function, pattern))
            checked += 1
    assert checked >= (1 if module is None else 100)


def test_calls_outside_statements_belong_to_none() -> None:
    function = ast.parse(TRICKY).body[0]

    owners = [type(statement).__name__ for statement, _ in _owned_calls(function, "g")]

    # Not the default x=g(), not the `except g()` header; the match case's call belongs to the match.
    assert sorted(owners) == sorted(
        ["Assign", "Assign", "Expr", "Match", "For", "If", "Expr", "While", "Expr", "Return"]
    )
