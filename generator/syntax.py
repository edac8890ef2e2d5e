"""Facts about stdlib ``ast`` nodes that several parts of the generator ask, each answered once.

The node-kind tuples name what a check means ("a definition", "an import") instead of repeating
the classes; the helpers answer questions whose answers must agree everywhere (which name an
import binds, what a decorator is called), so a planner, a check and the assembler never disagree.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)
DEFINITION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
IMPORT_NODES = (ast.Import, ast.ImportFrom)

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
DefinitionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def bound_name(alias: ast.alias) -> str:
    """The name an import alias binds in the importing module: ``import a.b`` binds ``a``."""
    return (alias.asname or alias.name).split(".")[0]


def import_bindings(statements: Iterable[ast.stmt]) -> set[str]:
    """Every name the import statements among ``statements`` bind (others are ignored)."""
    return {bound_name(alias) for node in statements if isinstance(node, IMPORT_NODES) for alias in node.names}


def decorator_name(node: ast.expr) -> str:
    """The last name of a decorator, called or not: ``auto_docstring`` for ``@utils.auto_docstring(...)``."""
    target = node.func if isinstance(node, ast.Call) else node
    return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")


def is_docstring(statement: ast.stmt) -> bool:
    """A bare string literal statement: the docstring when it opens a body."""
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )
