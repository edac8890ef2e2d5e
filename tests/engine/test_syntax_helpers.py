"""The fast tree questions of generator.syntax answer what the slow stdlib ways answer."""

from __future__ import annotations

import ast
import itertools

import pytest

from modelgraft.generator.syntax import children, dotted_name, nested_statements, same_syntax, walk
from modelgraft.generator.upstream.locate import module_path

TRICKY = """
import a.b as c
try:
    from .x import y
except* (ValueError, TypeError) as e:
    match e:
        case [1, *rest] if rest:
            def inner(): return lambda: 1
        case _:
            pass
finally:
    class K:
        async def f(self):
            async with z:
                async for q in r:
                    import w
while x:
    for i in j:
        if k: from . import m
        else: x = 1 if True else 0
    else: del x
else: break_ = True
"""


@pytest.fixture(scope="module")
def upstream() -> ast.Module:
    return ast.parse(module_path("transformers.models.llama.modeling_llama").read_text(encoding="utf-8"))


def _statement_like(tree: ast.AST) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.stmt, ast.excepthandler, ast.match_case))]


@pytest.mark.parametrize("source", [TRICKY, None], ids=["tricky", "llama"])
def test_nested_statements_finds_every_statement_ast_walk_finds(source: str | None, upstream: ast.Module) -> None:
    tree = ast.parse(source) if source else upstream

    found = list(nested_statements(tree))

    assert len(found) == len({id(n) for n in found})
    assert {id(n) for n in found} == {id(n) for n in _statement_like(tree)}


@pytest.mark.parametrize("source", [TRICKY, None], ids=["tricky", "llama"])
def test_walk_gives_the_nodes_of_ast_walk_in_its_order(source: str | None, upstream: ast.Module) -> None:
    tree = ast.parse(source) if source else upstream

    assert [id(n) for n in walk(tree)] == [id(n) for n in ast.walk(tree)]


@pytest.mark.parametrize("source", [TRICKY, None], ids=["tricky", "llama"])
def test_children_are_the_nodes_of_iter_child_nodes_in_its_order(source: str | None, upstream: ast.Module) -> None:
    tree = ast.parse(source) if source else upstream

    for node in ast.walk(tree):
        assert [id(n) for n in children(node)] == [id(n) for n in ast.iter_child_nodes(node)]


def test_same_syntax_agrees_with_comparing_dumps(upstream: ast.Module) -> None:
    # Every statement against itself re-parsed elsewhere (equal, positions differ) and against its neighbours.
    reparsed = ast.parse("\n\n" + ast.unparse(upstream))
    pairs = list(zip(upstream.body, reparsed.body)) + list(itertools.pairwise(upstream.body))
    pairs += [(ast.parse("x = 1").body, ast.parse("x = True").body), (ast.parse("'a'"), ast.parse("u'a'"))]
    pairs += [(ast.parse("f(a, b)"), ast.parse("f(a)")), (ast.parse("x = 1.0"), ast.parse("x = 1"))]

    for a, b in pairs:
        dumps_equal = _dump(a) == _dump(b)
        assert same_syntax(a, b) == dumps_equal, (_dump(a)[:200], _dump(b)[:200])
    assert any(same_syntax(a, b) for a, b in pairs) and not all(same_syntax(a, b) for a, b in pairs)


def _dump(node: ast.AST | list[ast.AST]) -> str:
    nodes = node if isinstance(node, list) else [node]
    return "\n".join(ast.dump(n, include_attributes=False) for n in nodes)


def test_dotted_name_is_what_unparse_prints_for_names_and_attributes(upstream: ast.Module) -> None:
    callees = [n.func for n in ast.walk(upstream) if isinstance(n, ast.Call)]
    callees += [ast.parse(text, mode="eval").body for text in ("f()(x)", "a[0].b", "(1).real", "x.y.z")]

    dotted = [c for c in callees if dotted_name(c) is not None]
    assert len(dotted) > 100 and len(dotted) < len(callees)
    for callee in callees:
        name = dotted_name(callee)
        if name is not None:
            assert name == ast.unparse(callee)
        else:
            assert not isinstance(_root(callee), ast.Name)


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node
