"""Turn a patch's body (a config-defined object or a snippet) into source text.

Sources are read from the defining file with ``ast`` positions, so patch
bodies keep their comments.  Decorators that only register the patch with a
PatchConfig are stripped; any other decorator on the patch is kept.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from modelgraft.generator import parse_cache
from modelgraft.generator.codegen.tokens import reindent
from modelgraft.generator.dsl.config import PatchConfig
from modelgraft.generator.dsl.patches import ImportSpec
from modelgraft.generator.errors import PatchSourceError
from modelgraft.generator.source_lines import parser_lines
from modelgraft.generator.syntax import DEFINITION_NODES, IMPORT_NODES, DefinitionNode, is_docstring, nested_statements
from modelgraft.generator.upstream.index import statement_start

Definition = DefinitionNode
# A run's parsed config files: path -> (lines, tree); kept by the run's context, never across runs.
ParsedFiles = dict[str, tuple[list[str], ast.Module]]


@dataclass(frozen=True)
class PatchSource:
    """A definition's text at column 0 (from ``def``/``class``), its decorators, and its AST."""

    name: str
    text: str
    decorators: tuple[str, ...]
    node: Definition
    origin: str
    # Rows (1-based, within ``text``) where docstrings start; they re-indent with the code.
    docstring_rows: frozenset[int]
    files: tuple[Path, ...] = ()
    # Module-level imports a snippet declares ahead of its definition.
    imports: tuple[ImportSpec, ...] = ()


def docstring_rows(node: ast.AST, first_row: int = 1) -> frozenset[int]:
    rows = set()
    for sub in (node, *nested_statements(node)):  # definitions are statements: no expression is visited
        if isinstance(sub, DEFINITION_NODES) and sub.body and is_docstring(sub.body[0]):
            rows.add(sub.body[0].lineno - first_row + 1)
    return frozenset(rows)


def from_definition(
    node: Definition, lines: list[str], *, origin: str, skip: set[int] = frozenset(), files: tuple[Path, ...] = ()
) -> PatchSource:
    """Cut ``node`` out of ``lines``; decorators at indexes in ``skip`` are dropped."""
    decorators = tuple(decorator_text(lines, d) for i, d in enumerate(node.decorator_list) if i not in skip)
    text = "".join(lines[node.lineno - 1 : _end_with_trailing_comments(node, lines)])
    rows = docstring_rows(node, node.lineno)
    text = reindent(text, -node.col_offset, docstring_rows=rows)
    parsed = parse_cache.parse(text).body[0]
    return PatchSource(node.name, text, decorators, parsed, origin, docstring_rows(parsed), files)


def _comment_indent(line: str) -> int | None:
    stripped = line.lstrip()
    return len(line) - len(stripped) if stripped.startswith("#") else None


def _end_with_trailing_comments(node: Definition, lines: list[str]) -> int:
    """Last line of ``node`` counting comments after its last statement that are indented into its body."""
    end = last = node.end_lineno
    while end < len(lines):
        line = lines[end]
        indent = _comment_indent(line)
        if indent is not None and indent > node.col_offset:
            end += 1
            last = end
        elif not line.strip():
            end += 1
        else:
            break
    return last


def leading_comment_start(stmt: ast.stmt, lines: list[str]) -> int:
    """First line of the comment block directly above ``stmt`` at its indentation (else its own start)."""
    start = statement_start(stmt)
    while start > 1 and _comment_indent(lines[start - 2]) == stmt.col_offset:
        start -= 1
    return start


def decorator_text(lines: list[str], node: ast.expr) -> str:
    """``@expr`` at column 0, continuation lines shifted with it."""
    col = node.col_offset - 1
    return reindent(" " * col + "@" + _span(lines, node), -col)


def _span(lines: list[str], node: ast.expr) -> str:
    if node.lineno == node.end_lineno:
        return lines[node.lineno - 1][node.col_offset : node.end_col_offset]
    first = lines[node.lineno - 1][node.col_offset :]
    middle = lines[node.lineno : node.end_lineno - 1]
    last = lines[node.end_lineno - 1][: node.end_col_offset]
    return "".join([first, *middle, last])


def _parse_file(path: str, parsed: ParsedFiles) -> tuple[list[str], ast.Module]:
    if path not in parsed:
        text = Path(path).read_text(encoding="utf-8")
        parsed[path] = (parser_lines(text), ast.parse(text, filename=path))
    return parsed[path]


def _is_registration(decorator: ast.expr, module_globals: dict[str, Any]) -> bool:
    """True for ``@<a PatchConfig>.<primitive>(...)``: it registers the patch, it is not part of it."""
    call = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (
        isinstance(call, ast.Attribute)
        and isinstance(call.value, ast.Name)
        and isinstance(module_globals.get(call.value.id), PatchConfig)
    )


def from_object(obj: Any, parsed: ParsedFiles) -> PatchSource:
    """Source of a function or class defined at the top level of a config (or helper) module.

    ``parsed`` holds the files this run already parsed: many patches of a batch live in one file.
    """
    module = sys.modules.get(getattr(obj, "__module__", ""), None)
    filename = getattr(getattr(obj, "__code__", None), "co_filename", None) or getattr(module, "__file__", None)
    name = getattr(obj, "__name__", None)
    if not filename or not name or not Path(filename).is_file():
        raise PatchSourceError(f"cannot find the source file of patch body {obj!r}")
    lines, tree = _parse_file(filename, parsed)
    first_line = getattr(getattr(obj, "__code__", None), "co_firstlineno", None)
    for node in nested_statements(tree):
        if not isinstance(node, DEFINITION_NODES) or node.name != name:
            continue
        if first_line is not None and first_line not in (node.lineno, statement_start(node)):
            continue
        globals_ = vars(module) if module else {}
        skip = {i for i, d in enumerate(node.decorator_list) if _is_registration(d, globals_)}
        return from_definition(node, lines, origin=f"{filename}:{node.lineno}", skip=skip, files=(Path(filename),))
    raise PatchSourceError(f"no definition of {name!r} found in {filename}")


def from_text(text: str, *, origin: str) -> PatchSource:
    """Source of the single top-level def/class in ``text`` (a rendered snippet)."""
    try:
        tree = parse_cache.parse(text)
    except SyntaxError as exc:
        raise PatchSourceError(f"{origin} is not valid Python: line {exc.lineno}: {exc.msg}") from exc
    imports = [n for n in tree.body if isinstance(n, IMPORT_NODES)]
    defs = [n for n in tree.body if isinstance(n, DEFINITION_NODES)]
    if len(defs) != 1 or len(imports) + 1 != len(tree.body) or tree.body[-1] is not defs[0]:
        raise PatchSourceError(f"{origin} must hold imports, then exactly one function or class")
    source = from_definition(defs[0], parser_lines(text), origin=origin)
    return replace(source, imports=tuple(spec for node in imports for spec in ImportSpec.from_statement(node)))
