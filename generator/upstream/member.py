"""Upstream's own text of one function or method, as snippets see it (the ``upstream`` template variable).

A snippet that guards a slot keeps upstream's code for the eager path instead of restating it: it
renders upstream's header and docstring, puts its guard in front of upstream's body, or wraps one
run of upstream's statements in ``if <slot bound>: <guarded> else: <upstream statements>``. The
text comes from the upstream file by ``ast`` positions; every edit is re-parsed and compared with
upstream's tree, so a re-indent can never change what the code does (a multi-line string would),
and a pattern that matches no statement, or more than one, is an error naming the method.
"""

from __future__ import annotations

import ast
import copy
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from modelgraft.generator import parse_cache
from modelgraft.generator.errors import SnippetError
from modelgraft.generator.syntax import dotted_name, same_syntax, walk
from modelgraft.generator.upstream.index import ModuleIndex, UpstreamSources
from modelgraft.generator.upstream.read_heads import head_with_own_forward
from modelgraft.generator.upstream.source import ModelSource

_BLOCK_FIELDS = ("body", "orelse", "finalbody", "handlers")


@dataclass(frozen=True)
class CallSite:
    """One call in upstream's body, as source text, for a snippet to pass on to its slot."""

    #: The assignment target when the call is the whole value assigned ("logits", "loss"), or None.
    target: str | None
    #: Positional arguments, as source text.
    args: tuple[str, ...]
    #: Keyword arguments as (name, source text); ``**kwargs`` appears with name None.
    keywords: tuple[tuple[str | None, str], ...]

    def keyword(self, name: str, position: int | None = None) -> str | None:
        """The argument passed as ``name=`` or else at ``position``; None when absent."""
        for key, value in self.keywords:
            if key == name:
                return value
        if position is not None and position < len(self.args):
            return self.args[position]
        return None

    #: The target of the assignment holding the call anywhere in its value (``logits = self.lm_head(h).float()``).
    assigned: str | None = None
    #: The call is the whole value of its statement (assigned, returned or evaluated), not part of an expression.
    whole: bool = False

    @property
    def passes_kwargs(self) -> bool:
        return any(key is None for key, _ in self.keywords)


def _calls(node: ast.AST, pattern: str) -> list[ast.Call]:
    """Calls of ``pattern`` below ``node``; a callee that is a plain dotted name is compared without unparsing it."""
    return [n for n in walk(node) if isinstance(n, ast.Call) and _callee(n) == pattern]


def _callee(call: ast.Call) -> str:
    return dotted_name(call.func) or ast.unparse(call.func)


# Trees are shared and never changed in place (parse_cache), so what one holds is a fact of the tree:
# snippets ask the same upstream function for several calls (has_call, call, wrapping), and a model's
# configs render several snippets over it. Kept while the tree lives.
_OWNED_CALLS: weakref.WeakKeyDictionary[ast.AST, dict[str, list[tuple[ast.stmt, ast.Call]]]] = (
    weakref.WeakKeyDictionary()
)


def _owned_calls(root: ast.AST, pattern: str) -> list[tuple[ast.stmt, ast.Call]]:
    """Each call of ``pattern`` below ``root`` with the statement that owns it: the innermost statement of
    the blocks :func:`_statement_lists` reaches that holds the call. One walk of the tree for every pattern.

    A call in an ``except`` clause's header belongs to no statement (the handler is not one), and a call
    outside every block (a decorator, a default) to none either.
    """
    by_callee = _OWNED_CALLS.get(root)
    if by_callee is None:
        by_callee = _OWNED_CALLS[root] = _owned_calls_by_callee(root)
    return list(by_callee.get(pattern, ()))


def _owned_calls_by_callee(root: ast.AST) -> dict[str, list[tuple[ast.stmt, ast.Call]]]:
    """Every owned call below ``root`` (see :func:`_owned_calls`), by callee, in the order one walk finds them."""
    found: dict[str, list[tuple[ast.stmt, ast.Call]]] = {}
    # (node, its owner, whether its block fields are blocks: it is the root or a statement of a block)
    todo: list[tuple[ast.AST, ast.stmt | None, bool]] = [(root, None, True)]
    while todo:
        node, owner, opens_blocks = todo.pop()
        if isinstance(node, ast.Call) and owner is not None:
            found.setdefault(_callee(node), []).append((owner, node))
        for name in node._fields:  # ast.iter_fields without its generator
            value = getattr(node, name, None)
            if isinstance(value, ast.AST):
                todo.append((value, owner, False))
            elif isinstance(value, list):
                block = opens_blocks and name in _BLOCK_FIELDS and _is_block(value)
                for item in value:
                    if not isinstance(item, ast.AST):
                        continue
                    if block:
                        todo.append((item, None if isinstance(item, ast.excepthandler) else item, True))
                    else:
                        todo.append((item, owner, False))
    return found


class _GuardRemover(ast.NodeTransformer):
    """Replaces each ``if <condition>: ... else: ...`` by its ``else:`` statements, counting them."""

    def __init__(self, condition: str) -> None:
        self.condition = condition
        self.removed = 0

    def visit_If(self, node: ast.If) -> ast.AST | list[ast.stmt]:
        self.generic_visit(node)
        if node.orelse and ast.unparse(node.test) == self.condition:
            self.removed += 1
            return node.orelse
        return node


def _without_guards(node: ast.FunctionDef | ast.AsyncFunctionDef, condition: str) -> tuple[ast.AST, int]:
    """A copy of ``node`` with every guard on ``condition`` replaced by upstream's statements, and their number.

    A copy: trees are shared (parse_cache) and never changed in place.
    """
    remover = _GuardRemover(condition)
    return remover.visit(copy.deepcopy(node)), remover.removed


def _is_block(value: list) -> bool:
    return bool(value) and isinstance(value[0], (ast.stmt, ast.excepthandler))


def _holders(statements: list[ast.stmt], block: list[ast.stmt]) -> set[int]:
    """The ids of the statements (and except handlers) below ``statements`` whose blocks lead to the
    statement list ``block``; empty when ``block`` is ``statements`` itself or not below it."""
    for statement in statements:
        for name in _BLOCK_FIELDS:
            inner = getattr(statement, name, None)
            if not (isinstance(inner, list) and _is_block(inner)):
                continue
            if inner is block:
                return {id(statement)}
            found = _holders(inner, block)
            if found:
                return found | {id(statement)}
    return set()


def _statement_lists(node: ast.AST):
    """Every list of statements below ``node`` (bodies of if/for/with/try/..., recursively)."""
    for name in _BLOCK_FIELDS:
        block = getattr(node, name, None)
        if isinstance(block, list) and _is_block(block):
            yield block
            for child in block:
                yield from _statement_lists(child)


#: The names upstream has given the KV cache parameter of a forward, newest first: transformers 5.24 renamed
#: ``past_key_values`` to ``cache``. Snippets read which one a member takes instead of assuming either.
CACHE_NAMES = ("cache", "past_key_values")


class UpstreamMember:
    """The upstream definition a snippet patches: parameters, header, docstring, body and call sites."""

    def __init__(self, index: ModuleIndex, node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str) -> None:
        self.index = index
        self.node = node
        self.qualname = qualname
        self._origin_line = node.lineno

    # -- what a template reads ----------------------------------------------------------------
    @property
    def params(self) -> tuple[str, ...]:
        """Parameter names, ``self`` left out, in order (positional, then keyword-only)."""
        args = self.node.args
        names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        return tuple(names[1:] if names and names[0] in ("self", "cls") else names)

    @property
    def var_keyword(self) -> str | None:
        """The name of upstream's ``**kwargs`` parameter, None if it takes none."""
        kwarg = self.node.args.kwarg
        return kwarg.arg if kwarg is not None else None

    @property
    def cache_param(self) -> str | None:
        """The name upstream's parameters give the KV cache (one of :data:`CACHE_NAMES`), None if it takes none."""
        return next((name for name in CACHE_NAMES if name in self.params), None)

    def decorator_arguments(self, name: str) -> tuple[str, ...] | None:
        """The positional arguments, as source text, of upstream's decorator call ``@name(...)`` on this member;
        None when upstream does not decorate it so. A guard that drops such a decorator reads what it named."""
        for decorator in self.node.decorator_list:
            if isinstance(decorator, ast.Call) and dotted_name(decorator.func) == name:
                return tuple(self.index.segment(a) or ast.unparse(a) for a in decorator.args)
        return None

    @property
    def header(self) -> str:
        """``def name(...) -> ...:`` exactly as upstream writes it, at column 0, without decorators."""
        first_body = self._first_body_line()
        lines = self.index.lines[self.node.lineno - 1 : first_body - 1]
        return self._dedent("".join(lines), self.node.col_offset).rstrip() + "\n"

    @property
    def docstring(self) -> str:
        """The docstring statement at body indentation (4 spaces), or ""."""
        doc = self._docstring_node()
        if doc is None:
            return ""
        return self._reindent(self._text(doc.lineno, doc.end_lineno), self._body_column(), 4)

    @property
    def body(self) -> str:
        """The statements after the docstring, at 4 spaces: what follows a guard placed at the top."""
        return self._body_text()

    def call(self, pattern: str) -> CallSite:
        """The one call of ``pattern`` (e.g. ``"self.experts"``) in the body, as source text."""
        return self._call_site(*self._find(pattern))

    def calls(self, pattern: str) -> tuple[CallSite, ...]:
        """Every call of ``pattern`` in the body, in source order, as source text (see :meth:`replacing_calls`)."""
        return tuple(self._call_site(statement, call) for statement, call in self._in_source_order(pattern))

    def _in_source_order(self, pattern: str) -> list[tuple[ast.stmt, ast.Call]]:
        return sorted(_owned_calls(self.node, pattern), key=lambda found: (found[1].lineno, found[1].col_offset))

    def _call_site(self, statement: ast.stmt, call: ast.Call) -> CallSite:
        target = assigned = None
        if isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            assigned = ", ".join(ast.unparse(t) for t in targets)
            target = assigned if statement.value is call else None
        whole = isinstance(statement, (ast.Assign, ast.AnnAssign, ast.Return, ast.Expr)) and statement.value is call
        args = tuple(self.index.segment(a) or ast.unparse(a) for a in call.args)
        keywords = tuple((k.arg, self.index.segment(k.value) or ast.unparse(k.value)) for k in call.keywords)
        return CallSite(target=target, args=args, keywords=keywords, assigned=assigned, whole=whole)

    def weight_projection(self, attr: str) -> str:
        """``attr``, the output projection a fused loss multiplies by its weight, checked to be no more than that.

        Refused, naming the class, where the method's class builds ``self.<attr>`` as a class of this module with a
        forward of its own (Dory's per-entry logit scale): the fused loss would skip that forward.
        """
        source = ModelSource(self.index.path.stem, self.index, UpstreamSources())
        reason = head_with_own_forward(source, self.qualname.split(".")[0], attr)
        if reason:
            raise self._fail(f"{reason}; the loss cannot go behind causal_lm_loss_slot")
        return attr

    def has_call(self, pattern: str) -> bool:
        return bool(_calls(self.node, pattern))

    @property
    def source(self) -> str:
        """The whole function at column 0, decorators left out (the patch keeps upstream's)."""
        return self.header + self.docstring + self._body_text()

    def with_prefix(self, guard: str) -> UpstreamMember:
        """The function with ``guard`` (source at column 0) placed before upstream's body."""
        indented = "".join(f"    {line}\n" if line.strip() else "\n" for line in guard.strip("\n").splitlines())
        body = self._reindented_body()
        try:
            derived = self._derived(self.header + self.docstring + indented + body)
        except SyntaxError as exc:
            self._verify(body, self._code_statements())  # names the body when it is the part at fault
            raise self._fail(f"an edit produced invalid Python ({exc.msg})") from exc
        # Upstream's statements close the derived body: verified there, in the text that is emitted.
        expected = self._code_statements()
        statements = derived.node.body
        if not same_syntax(statements[len(statements) - len(expected) :], expected):
            raise self._changed_by_reindent()
        return derived

    def replacing_call(self, pattern: str, condition: str, replacement: str) -> UpstreamMember:
        """The function with the one statement calling ``pattern`` under ``else:`` of ``if condition:``
        that same statement with the call replaced by ``replacement`` (source of an expression).

        This is how a guard reaches a call that is part of a larger statement
        (``hidden = self.experts(x, idx, w).view(shape)``): everything around the call stays upstream's.
        """
        statement, call = self._find(pattern)
        positions = self.index.source_lines
        source = self.index.source
        first = positions.offset(self._stmt_start(statement), 0)
        begin = positions.offset(call.lineno, call.col_offset)
        end = positions.offset(call.end_lineno, call.end_col_offset)
        last = positions.offset(statement.end_lineno + 1, 0)
        edited = source[first:begin] + replacement + source[end:last]
        guarded = self._reindent(edited, statement.col_offset, 0)
        return self.wrapping(pattern, condition, guarded)

    def replacing_calls(self, pattern: str, condition: str, replacements: Sequence[str]) -> UpstreamMember:
        """The function with each statement calling ``pattern`` under ``else:`` of ``if condition:`` that same
        statement with the call replaced by its replacement (``replacements``: one per call of :meth:`calls`, in
        that order).

        :meth:`replacing_call` for a module that upstream calls in more than one place: OPT's decoder layer calls
        each of its layer norms in two statements, before the attention or MLP where ``do_layer_norm_before`` is
        set and after it where it is not. Each statement is guarded alone, so whichever runs goes behind the slot.
        Every call must be the only call of ``pattern`` in its statement. Verified as a whole: with every new guard
        replaced by its ``else:`` branch, the function is the one it was.
        """
        whole = self._derived(self.source)
        found = whole._in_source_order(pattern)
        if not found:
            raise self._fail(f"it calls no {pattern}(...)")
        if len(replacements) != len(found):
            raise self._fail(f"{len(found)} calls of {pattern}(...) and {len(replacements)} replacements")
        if len({id(statement) for statement, _ in found}) != len(found):
            raise self._fail(f"one statement calls {pattern}(...) more than once: its calls cannot be guarded alone")
        positions = whole.index.source_lines
        source = whole.index.source
        # Last call first, so that the offsets of the calls before it stay valid.
        for (statement, call), replacement in reversed(list(zip(found, replacements, strict=True))):
            first = positions.offset(self._stmt_start(statement), 0)
            begin = positions.offset(call.lineno, call.col_offset)
            end = positions.offset(call.end_lineno, call.end_col_offset)
            last = positions.offset(statement.end_lineno + 1, 0)
            column = statement.col_offset
            pad = " " * column
            guarded = (
                f"{pad}if {condition}:\n"
                + self._reindent(source[first:begin] + replacement + source[end:last], column, column + 4)
                + f"{pad}else:\n"
                + self._reindent(source[first:last], column, column + 4)
            )
            source = source[:first] + guarded + source[last:]
        try:
            derived = self._derived(source)
        except SyntaxError as exc:
            raise self._fail(f"guarding its calls of {pattern}(...) gave invalid Python ({exc.msg})") from exc
        before, guards_before = _without_guards(whole.node, condition)
        after, guards_after = _without_guards(derived.node, condition)
        if guards_after - guards_before != len(found) or not same_syntax(after.body, before.body):
            raise self._fail("its statements change when re-indented under the guards (a multi-line string?)")
        return derived

    def calling_instead(self, pattern: str, function: str) -> UpstreamMember:
        """The function with every call of ``pattern`` calling ``function`` instead, with the same arguments.

        Only the callee's text changes: ``AutoModel.from_config(config.vision_config)`` becomes
        ``build_sub_model(config.vision_config)``, every argument staying upstream's, and the result is compared
        with upstream's tree (each changed call's arguments unchanged, nothing else changed). A body with no
        such call is an error naming the member.
        """
        whole = self._derived(self.source)
        calls = sorted((call for _, call in _owned_calls(whole.node, pattern)), key=lambda c: (c.lineno, c.col_offset))
        if not calls:
            raise self._fail(f"it calls no {pattern}(...)")
        positions = whole.index.source_lines
        source = whole.index.source
        for call in reversed(calls):
            begin = positions.offset(call.func.lineno, call.func.col_offset)
            end = positions.offset(call.func.end_lineno, call.func.end_col_offset)
            source = source[:begin] + function + source[end:]
        try:
            derived = self._derived(source)
        except SyntaxError as exc:
            raise self._fail(f"calling {function} instead of {pattern} gave invalid Python ({exc.msg})") from exc
        replaced = [call for _, call in _owned_calls(derived.node, function)]
        if _owned_calls(derived.node, pattern) or len(replaced) != len(calls):
            raise self._fail(f"calling {function} instead of {pattern} changed other calls")  # pragma: no cover
        for before, after in zip(calls, sorted(replaced, key=lambda c: (c.lineno, c.col_offset))):
            if not (same_syntax(before.args, after.args) and same_syntax(before.keywords, after.keywords)):
                raise self._fail(
                    f"calling {function} instead of {pattern} changed a call's arguments"
                )  # pragma: no cover
        return derived

    def adding_keyword(self, pattern: str, name: str, value: str) -> UpstreamMember:
        """The function with ``name=value`` (``value``: source of an expression) added to the one call of
        ``pattern``, which must not pass ``name`` already; every other token stays upstream's.

        This is how a patch hands on what upstream computes and then leaves out of a call (Qwen3-Omni-MoE's
        thinker builds its MoE output without the ``router_logits`` its text model returned).
        """
        whole = self._derived(self.source)
        _, call = whole._find(pattern)
        if any(keyword.arg == name for keyword in call.keywords):
            raise self._fail(f"its call of {pattern}(...) already passes {name}=")
        arguments = [*call.args, *call.keywords]
        positions = whole.index.source_lines
        if arguments:
            last = max(arguments, key=lambda node: (node.end_lineno, node.end_col_offset))
            at, text = positions.offset(last.end_lineno, last.end_col_offset), f", {name}={value}"
        else:
            at, text = positions.offset(call.end_lineno, call.end_col_offset) - 1, f"{name}={value}"
        source = whole.index.source
        try:
            derived = self._derived(source[:at] + text + source[at:])
        except SyntaxError as exc:
            raise self._fail(f"adding {name}= to its call of {pattern}(...) gave invalid Python ({exc.msg})") from exc
        _, added = derived._find(pattern)
        if [k.arg for k in added.keywords] != [*(k.arg for k in call.keywords), name] or not same_syntax(
            added.args, call.args
        ):
            raise self._fail(f"adding {name}= changed its call of {pattern}(...) otherwise")  # pragma: no cover
        return derived

    def wrapping(self, first: str, condition: str, guarded: str, *, last: str | None = None) -> UpstreamMember:
        """The whole function with the statements from the one calling ``first`` to the one calling ``last``
        (the same statement when ``last`` is None) under ``else:`` of ``if condition: guarded``.

        Both statements must be in the same block; ``guarded`` is source at column 0.
        """
        block, start, end = self._run(first, last or first)
        column = block[start].col_offset
        pad = " " * column
        original = self._text(self._stmt_start(block[start]), block[end].end_lineno)
        replacement = (
            f"{pad}if {condition}:\n"
            + "".join(f"{pad}    {line}\n" if line.strip() else "\n" for line in guarded.strip("\n").splitlines())
            + f"{pad}else:\n"
            + self._reindent(original, column, column + 4)
        )
        lines = self.index.lines
        body_start = self._body_start_line()
        before = "".join(lines[body_start - 1 : self._stmt_start(block[start]) - 1])
        after = "".join(lines[block[end].end_lineno : self.node.end_lineno])
        body = self._reindent(before + replacement + after, self._body_column(), 4)
        try:
            derived = self._derived(self.header + self.docstring + body)
        except SyntaxError as exc:
            self._body_text()  # names the body when it is the part at fault
            raise self._fail(f"the guarded body is not valid Python ({exc.msg})") from exc
        # One parse verifies it all: the statements around the run, moved as the whole body is, and the run
        # under else:, 4 spaces deeper. Only where that fails is the body parsed alone, to say which moved.
        if not self._wraps(derived, block, start, end, condition):
            self._body_text()
            raise self._fail("its statements change when re-indented under the guard (a multi-line string?)")
        return derived

    def _wraps(self, derived: UpstreamMember, block: list[ast.stmt], start: int, end: int, condition: str) -> bool:
        """Whether ``derived``'s code is upstream's with ``block[start : end + 1]`` (a run of the statement
        list ``block``) replaced by one ``if condition: ... else: <the run>``, positions ignored.

        Upstream's statements are compared whole (``same_syntax``) except along the statements that hold
        ``block``; the guarded branch is the snippet's code and is not compared. Docstrings are left out: a
        re-indent changes their text, and ``inspect.cleandoc`` undoes it.
        """
        skip = 1 if self._docstring_node() is not None else 0
        if (derived._docstring_node() is not None) != bool(skip):
            return False
        holders = _holders(self.node.body, block)

        def same(mine: object, theirs: object) -> bool:
            if theirs is block:
                return run_replaced(mine)
            if isinstance(theirs, list):
                return (
                    isinstance(mine, list)
                    and len(mine) == len(theirs)
                    and all(same(a, b) for a, b in zip(mine, theirs, strict=True))
                )
            if isinstance(theirs, ast.AST) and id(theirs) in holders:
                return type(mine) is type(theirs) and all(
                    same(getattr(mine, name, None), getattr(theirs, name, None)) for name in theirs._fields
                )
            return same_syntax(mine, theirs)

        def run_replaced(mine: object) -> bool:
            if not isinstance(mine, list) or len(mine) != len(block) - (end - start):
                return False
            guard = mine[start]
            first = skip if block is self.node.body else 0
            return (
                isinstance(guard, ast.If)
                and ast.unparse(guard.test) == condition
                and same_syntax(guard.orelse, block[start : end + 1])
                and same_syntax(mine[first:start], block[first:start])
                and same_syntax(mine[start + 1 :], block[end + 1 :])
            )

        if block is self.node.body:
            return run_replaced(derived.node.body)
        return same(derived.node.body[skip:], self.node.body[skip:])

    def _derived(self, text: str) -> UpstreamMember:
        """A member over edited text, so a snippet can chain edits (guard the loss, then the aux loss).

        The text is parsed once, and that tree is also what the edit is verified against; a SyntaxError
        is left to the caller, which knows which part of the text to blame.
        """
        tree = parse_cache.parse(text)
        node = tree.body[0]
        index = ModuleIndex(module=self.index.module, path=self.index.path, source=text, tree=tree)
        derived = UpstreamMember(index, node, self.qualname)
        derived._origin_line = self._origin_line
        return derived

    # -- internals ------------------------------------------------------------------------------
    def _fail(self, cause: str) -> SnippetError:
        return SnippetError(f"upstream {self.qualname} (line {self._origin_line} of {self.index.path.name}): {cause}")

    def _docstring_node(self) -> ast.Expr | None:
        first = self.node.body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            return first
        return None

    def _code_statements(self) -> list[ast.stmt]:
        return self.node.body[1:] if self._docstring_node() is not None else self.node.body

    def _first_body_line(self) -> int:
        first = self.node.body[0]
        if first.lineno == self.node.lineno:
            raise self._fail("the body shares the line of the def; a guard cannot be placed")
        return first.lineno

    def _body_start_line(self) -> int:
        """First line after the docstring (comments before the first statement included)."""
        doc = self._docstring_node()
        return doc.end_lineno + 1 if doc is not None else self._first_body_line()

    def _body_column(self) -> int:
        return self.node.body[0].col_offset

    @staticmethod
    def _stmt_start(node: ast.stmt) -> int:
        decorators = getattr(node, "decorator_list", None) or []
        return min([d.lineno for d in decorators] + [node.lineno])

    def _text(self, first: int, last: int) -> str:
        return "".join(self.index.lines[first - 1 : last])

    @staticmethod
    def _dedent(text: str, column: int) -> str:
        return UpstreamMember._reindent(text, column, 0)

    @staticmethod
    def _reindent(text: str, old: int, new: int) -> str:
        out = []
        for line in text.splitlines(keepends=True):
            if not line.strip():
                out.append("\n")
            elif line[:old].strip():
                out.append(line)  # a continuation line left of the block: leave it where it is
            else:
                out.append(" " * new + line[old:])
        return "".join(out)

    def _reindented_body(self) -> str:
        """The statements after the docstring at 4 spaces, not yet verified."""
        return self._reindent(self._text(self._body_start_line(), self.node.end_lineno), self._body_column(), 4)

    def _body_text(self) -> str:
        """The body at 4 spaces, verified: parsed and compared with the tree, unless it is the tree's own text.

        A member an edit derived (``with_prefix``, ``wrapping``) is a function at column 0 whose body is at
        4 spaces already, so its body text is the very lines its tree was parsed from: those parse to that
        tree, and parsing them again (most of a zoo-wide run's verifications) proves nothing more.
        """
        text = self._reindented_body()
        if self._body_column() != 4 or text != self._text(self._body_start_line(), self.node.end_lineno):
            self._verify(text, self._code_statements())
        return text

    def _verify(self, text: str, expected: list[ast.stmt]) -> None:
        """The re-indented text parses to upstream's statements: indentation changed nothing else."""
        try:
            tree = parse_cache.parse("def _():\n" + text)
        except SyntaxError as exc:
            raise self._fail(f"its body cannot be re-indented ({exc.msg})") from exc
        if not same_syntax(tree.body[0].body, expected):
            raise self._changed_by_reindent()

    def _changed_by_reindent(self) -> SnippetError:
        return self._fail("its body changes when re-indented (a multi-line string?); patch it by hand")

    def _find(self, pattern: str) -> tuple[ast.stmt, ast.Call]:
        found = _owned_calls(self.node, pattern)
        if len(found) != 1:
            raise self._fail(f"expected exactly one call of {pattern}(...), found {len(found)}")
        return found[0]

    def _run(self, first: str, last: str) -> tuple[list[ast.stmt], int, int]:
        statement_first, _ = self._find(first)
        for block in _statement_lists(self.node):
            if statement_first in block:
                start = block.index(statement_first)
                for end in range(start, len(block)):
                    if _calls(block[end], last):
                        return block, start, end
                raise self._fail(f"no statement calling {last}(...) follows the call of {first}(...) in its block")
        raise self._fail(f"the call of {first}(...) is in no block")  # pragma: no cover - _find found it
