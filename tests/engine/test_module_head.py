"""before_first_definition: the complete statements ahead of a module's first top-level definition.

Check 7 (requested imports kept) parses only that head of each normalized output; it must end
exactly where the first top-level def, class or decorator begins, whatever strings or comments say.
"""

from __future__ import annotations

import ast

import pytest

from modelgraft.generator.codegen.tokens import before_first_definition

HEAD = '''# Copyright
"""Module docstring.
def not_code():
class NotCode:
"""

import os
from typing import (
    Any,
)

if os.environ:
    def inside_if(): ...
    class InsideIf: ...
x = """
@not_a_decorator
"""  # a comment
# def commented_out():
'''


@pytest.mark.parametrize(
    "first",
    ["def f():\n    pass\n", "class K:\n    pass\n", "@decorator\nclass K: ...\n", "async def f():\n    pass\n"],
    ids=["def", "class", "decorator", "async-def"],
)
def test_the_head_ends_where_the_first_top_level_definition_starts(first: str) -> None:
    source = HEAD + first + "import late\n"

    head = before_first_definition(source)

    assert head == HEAD
    assert {n.id for n in ast.walk(ast.parse(head)) if isinstance(n, ast.Name)} >= {"os", "x"}


def test_a_module_without_definitions_is_all_head() -> None:
    assert before_first_definition(HEAD) == HEAD
    assert before_first_definition("") == ""
