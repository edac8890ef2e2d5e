"""Build the patched module text from a validated :class:`Plan`.

Untouched upstream statements are copied byte-for-byte by their AST
positions (comments and blank lines between them included); patched members
are emitted from their patch sources under a banner.  Small in-statement edits
(absolute imports, dropped import names, ``__all__``, class-name lists) are exact span edits.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field

from modelgraft.generator.codegen.exclusion import name_lists
from modelgraft.generator.codegen.patch_source import PatchSource, decorator_text, leading_comment_start
from modelgraft.generator.codegen.plan import Plan, ResolvedPatch
from modelgraft.generator.codegen.tokens import apply_edits, reindent, rename_definition
from modelgraft.generator.dsl.patches import PatchKind
from modelgraft.generator.output.modular_banner import modular_banner_edits
from modelgraft.generator.source_lines import parser_lines
from modelgraft.generator.syntax import (
    DEFINITION_NODES,
    FUNCTION_NODES,
    IMPORT_NODES,
    bound_name,
    decorator_name,
    is_docstring,
    nested_statements,
)
from modelgraft.generator.upstream.index import ModuleIndex, defined_names, statement_start
from modelgraft.generator.upstream.locate import resolve_relative

Edit = tuple[int, int, int, int, str]


@dataclass
class _Emitter:
    """Upstream text with pending span edits, rendered range by range."""

    index: ModuleIndex
    edits: list[Edit] = field(default_factory=list)

    def render(self, first: int, last: int) -> str:
        """Lines ``first..last`` (1-based, inclusive) with the edits that fall inside them."""
        text = "".join(self.index.lines[first - 1 : last])
        local = [
            (r - first + 1, c, er - first + 1, ec, t) for r, c, er, ec, t in self.edits if first <= r and er <= last
        ]
        return apply_edits(text, local) if local else text


def _absolute_import_edits(index: ModuleIndex, skip: set[int]) -> list[Edit]:
    """Rewrite every relative ``from .x import y`` (also nested ones) to its absolute module."""
    edits = []
    for node in nested_statements(index.tree):  # an import is a statement: no expression is visited
        if not isinstance(node, ast.ImportFrom) or not node.level or id(node) in skip:
            continue
        module = resolve_relative(index.module, node.level, node.module, is_package=index.is_package)
        line = index.lines[node.lineno - 1]
        start = node.col_offset + len("from")
        start += len(line[start:]) - len(line[start:].lstrip())
        end = line.index(" import", start)
        edits.append((node.lineno, start, node.lineno, end, module))
    return edits


def _drop_import_edits(index: ModuleIndex, names: set[str]) -> tuple[list[Edit], set[int]]:
    edits, touched = [], set()
    for node in index.tree.body:
        if not isinstance(node, IMPORT_NODES):
            continue
        kept = [a for a in node.names if bound_name(a) not in names]
        if len(kept) == len(node.names):
            continue
        touched.add(id(node))
        end_col = len(index.lines[node.end_lineno - 1].rstrip("\r\n"))
        if not kept:
            text = ""
        elif isinstance(node, ast.ImportFrom):
            module = (
                resolve_relative(index.module, node.level, node.module, is_package=index.is_package)
                if node.level
                else node.module
            )
            text = ast.unparse(ast.ImportFrom(module=module, names=kept, level=0))
        else:
            text = ast.unparse(ast.Import(names=kept))
        edits.append((node.lineno, node.col_offset, node.end_lineno, end_col, text))
    return edits, touched


def _all_edit(index: ModuleIndex, dropped: set[str]) -> list[Edit]:
    """Remove dropped names from ``__all__``, keeping upstream's one-name-per-line layout when it has one."""
    value = index.dunder_all
    if not dropped or value is None:
        return []
    gone = [e for e in value.elts if isinstance(e, ast.Constant) and e.value in dropped]
    if not gone:
        return []
    rows = [e.lineno for e in value.elts]
    if len(set(rows)) == len(rows) and value.lineno not in rows:
        # One element per line: delete those lines whole.
        return [(e.lineno, 0, e.lineno + 1, 0, "") for e in gone]
    kept = [e for e in value.elts if e not in gone]
    new = type(value)(elts=kept, ctx=ast.Load())
    return [(value.lineno, value.col_offset, value.end_lineno, value.end_col_offset, ast.unparse(new))]


def _name_list_edits(index: ModuleIndex, dropped: set[str]) -> list[Edit]:
    """Remove dropped classes from the class-name lists (``_no_split_modules``) of the classes that stay."""
    if not dropped:
        return []
    edits = []
    for node in index.tree.body:
        if not isinstance(node, ast.ClassDef) or node.name in dropped:
            continue
        for value in name_lists(node):
            kept = [e for e in value.elts if not (isinstance(e, ast.Constant) and e.value in dropped)]
            if len(kept) < len(value.elts):
                new = type(value)(elts=kept, ctx=ast.Load())
                edits.append(
                    (value.lineno, value.col_offset, value.end_lineno, value.end_col_offset, ast.unparse(new))
                )
    return edits


def _same_decorator(a: str, b: str) -> bool:
    try:
        return ast.dump(ast.parse(a.lstrip("@").strip(), mode="eval")) == ast.dump(
            ast.parse(b.lstrip("@").strip(), mode="eval")
        )
    except SyntaxError:
        return a.strip() == b.strip()


def _decorator_text_name(text: str) -> str:
    return decorator_name(ast.parse(text.lstrip("@").strip(), mode="eval").body)


def merged_decorators(resolved: ResolvedPatch) -> list[str]:
    """Upstream decorators the patch keeps, then the patch's own, never one twice."""
    keep = resolved.patch.keep_decorators
    upstream: list[str] = []
    if resolved.upstream is not None and resolved.upstream_index is not None and keep is not False:
        lines = resolved.upstream_index.lines
        upstream = [decorator_text(lines, d) for d in resolved.upstream.decorator_list]
        if isinstance(keep, tuple):
            upstream = [d for d in upstream if _decorator_text_name(d) not in keep]
    own = list(resolved.source.decorators) if resolved.source else []
    merged = list(upstream)
    for d in own:
        if not any(_same_decorator(d, m) for m in merged):
            merged.append(d)
    return merged


def _definition(resolved: ResolvedPatch, name: str, indent: int, banner: str) -> str:
    source = resolved.source
    assert source is not None
    text = source.text if source.name == name else rename_definition(source.text, name)
    block = "".join(d + "\n" for d in merged_decorators(resolved)) + text
    rows = frozenset(r + len(block.splitlines()) - len(text.splitlines()) for r in source.docstring_rows)
    body = reindent(block, indent, docstring_rows=rows)
    description = f": {resolved.patch.description}" if resolved.patch.description else ""
    return f"{' ' * indent}# [{banner}] {resolved.patch.target}{description}\n{body}"


def _init_extra(resolved: ResolvedPatch, upstream_init: ast.FunctionDef) -> str:
    source = resolved.source
    assert source is not None
    body = source.node.body
    if body and is_docstring(body[0]):
        body = body[1:]
    if not body:
        return ""
    lines = parser_lines(source.text)
    text = "".join(lines[leading_comment_start(body[0], lines) - 1 :])
    target_col = upstream_init.body[0].col_offset
    text = reindent(text, target_col - body[0].col_offset)
    description = f": {resolved.patch.description}" if resolved.patch.description else ""
    return f"{' ' * target_col}# [MODIFIED INIT] {resolved.patch.target}{description}\n{text}"


def _ensure_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


class Assembler:
    """Emits one output module for one plan."""

    def __init__(
        self, plan: Plan, imports: list[str], post_import_blocks: list[str], header: str, *, version_check: str = ""
    ) -> None:
        self.plan = plan
        self.index = plan.index
        self.imports = imports
        # The call of the config's version check: first after the imports, before anything of the module runs.
        self.version_check = version_check
        self.post_import_blocks = post_import_blocks
        self.header = header
        self.dropped = plan.dropped
        drop_edits, touched = _drop_import_edits(self.index, plan.dropped_imports)
        # Upstream's "edit the modular file" banner is left out: our header says where this file comes from.
        edits = drop_edits + _absolute_import_edits(self.index, touched) + _all_edit(self.index, self.dropped)
        edits += _name_list_edits(self.index, self.dropped)
        self.emitter = _Emitter(self.index, edits + modular_banner_edits(self.index.source))

    def _preamble_block(self) -> str:
        parts = []
        if self.imports:
            parts.append("".join(statement + "\n" for statement in self.imports))
        if self.version_check:
            parts.append(self.version_check)
        for block in self.post_import_blocks:
            parts.append(_ensure_newline(textwrap.dedent(block).strip("\n")))
        for helper, description in self.plan.helpers:
            text = helper.text if isinstance(helper, PatchSource) else textwrap.dedent(helper).strip("\n")
            if isinstance(helper, PatchSource) and helper.decorators:
                text = "".join(d + "\n" for d in helper.decorators) + text
            label = f": {description}" if description else ""
            parts.append(f"# [HELPERS]{label}\n{_ensure_newline(text)}")
        return "\n\n".join(parts)

    def _insertion_point(self) -> int:
        """Index of the statement after which imports and helpers go: the last leading import."""
        last = -1
        for i, node in enumerate(self.index.tree.body):
            if isinstance(node, DEFINITION_NODES):
                break
            if isinstance(node, IMPORT_NODES):
                last = i
        return last

    def build(self) -> str:
        body = self.index.tree.body
        out = [self.header]
        previous_end = 0
        insert_after = self._insertion_point()
        preamble = self._preamble_block()
        if insert_after < 0 and preamble:
            out.append(preamble + "\n\n")
        for i, node in enumerate(body):
            start = statement_start(node)
            gap = self.emitter.render(previous_end + 1, start - 1) if start - 1 > previous_end else ""
            previous_end = node.end_lineno
            names = defined_names(node)
            if names and all(n in self.dropped for n in names):
                out.append(_strip_attached_comments(gap))
                continue
            out.append(gap)
            out.append(self._statement(node, names))
            if i == insert_after and preamble:
                out.append("\n" + preamble)
        out.append(self.emitter.render(previous_end + 1, len(self.index.lines)))
        return "".join(out)

    def _statement(self, node: ast.stmt, names: tuple[str, ...]) -> str:
        name = names[0] if len(names) == 1 else None
        resolved = self.plan.replaced.get(name) if name else None
        if resolved is not None:
            return self._replacement(resolved, name)
        if name in self.plan.modified_classes():
            return self._modified_class(node, name)
        return self.emitter.render(statement_start(node), node.end_lineno)

    def _replacement(self, resolved: ResolvedPatch, name: str) -> str:
        patch = resolved.patch
        if patch.kind is PatchKind.EXTERNAL_CLASS:
            description = f": {patch.description}" if patch.description else ""
            return (
                f"# [PATCHED CLASS] {name}{description}\n"
                f"from {patch.external_module} import {patch.external_name} as {name}\n"
            )
        banner = "PATCHED CLASS" if patch.kind is PatchKind.REPLACE_CLASS else "PATCHED FUNCTION"
        return _definition(resolved, name, 0, banner)

    def _modified_class(self, node: ast.ClassDef, name: str) -> str:
        methods = self.plan.methods.get(name, {})
        init_extra = self.plan.init_extras.get(name)
        body = list(node.body)
        first = body[0]
        lone_placeholder = len(body) == 1 and _is_placeholder(first)
        first_start = statement_start(first)
        inline = bool(self.index.lines[first.lineno - 1][: first.col_offset].strip())
        if inline:
            # `class X(Base): ...` on one line: cut the header before the body, which moves below it.
            indent = 4
            header = "".join(self.index.lines[statement_start(node) - 1 : first.lineno - 1])
            header += self.index.lines[first.lineno - 1][: first.col_offset].rstrip() + "\n"
            previous_end = first.lineno - 1 if not lone_placeholder else first.end_lineno
        else:
            indent = first.col_offset
            header = self.emitter.render(statement_start(node), first_start - 1)
            previous_end = first_start - 1
        out = [f"# [MODIFIED CLASS] {name}\n", header]
        for stmt in body:
            start = statement_start(stmt)
            gap = self.emitter.render(previous_end + 1, start - 1) if start - 1 > previous_end else ""
            previous_end = stmt.end_lineno
            if lone_placeholder:
                continue
            out.append(gap)
            member = stmt.name if isinstance(stmt, FUNCTION_NODES) else None
            if member in methods:
                out.append(_definition(methods[member], member, indent, "PATCHED METHOD"))
            elif stmt is first and inline:
                tail = "".join(self.index.lines[stmt.lineno - 1 : stmt.end_lineno])[stmt.col_offset :]
                out.append(" " * indent + tail)
            else:
                out.append(self.emitter.render(start, stmt.end_lineno))
                if member == "__init__" and init_extra is not None:
                    out.append(_init_extra(init_extra, stmt))
        extra = [r for m, r in methods.items() if r.inherited] + self.plan.added_methods.get(name, [])
        for i, resolved in enumerate(extra):
            banner = "PATCHED METHOD" if resolved.inherited else "ADDED METHOD"
            separator = "" if lone_placeholder and i == 0 else "\n"
            out.append(separator + _definition(resolved, resolved.patch.member_name, indent, banner))
        return "".join(out)


def _is_placeholder(stmt: ast.stmt) -> bool:
    """``pass`` or ``...``: a body that only exists because Python needs one."""
    return isinstance(stmt, ast.Pass) or (
        isinstance(stmt, ast.Expr) and getattr(stmt.value, "value", None) is Ellipsis
    )


def _strip_attached_comments(gap: str) -> str:
    """Drop the comment lines directly above a removed statement, keep the spacing."""
    lines = gap.splitlines(keepends=True)
    while lines and lines[-1].lstrip().startswith("#"):
        lines.pop()
    return "".join(lines)
