"""One Jinja compile per source for every Copier environment of a process.

Copier builds a fresh Jinja environment for each render, and ``copier update`` renders three times, each
compiling every question's ``when``, ``default`` and ``help`` again: updating two scaffolds compiled 52 distinct sources 1,012 times, a quarter of the update's time.
Each render also reads the template's files from a clone of its own, in a temporary folder: the same files
under another file name every time, so they are keyed without it.
What Jinja compiles from a source depends, besides the source and its name, only on the environment's
compile-time settings: its syntax, its extensions, whether it is async, its autoescape and finalize, and
what each filter and test is passed (the code calls them with or without the context). This keeps the
compiled code per source and such settings, and hands it to every environment whose settings are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import CodeType
from typing import Any

from jinja2 import Environment
from jinja2.utils import _PassArg

#: Settings the lexer and code generator read; two environments equal on them compile a source alike.
_SYNTAX = (
    "block_start_string",
    "block_end_string",
    "variable_start_string",
    "variable_end_string",
    "comment_start_string",
    "comment_end_string",
    "line_statement_prefix",
    "line_comment_prefix",
    "trim_blocks",
    "lstrip_blocks",
    "newline_sequence",
    "keep_trailing_newline",
    "optimized",
    "is_async",
)

#: Compiled code by (settings, source, name, raw, defer_init); a process renders a few hundred.
_COMPILED: dict[tuple[Any, ...], Any] = {}
_LIMIT = 4096


#: :func:`_passing`'s answer by the filters or tests themselves: every compile of a source reads it, over the
#: hundred or so filters an environment of Copier's has, and the environments of a process have a few sets. The
#: functions are held here, so no key's function can be freed and its id taken by another.
_PASSING: dict[tuple[tuple[str, Callable[..., Any]], ...], tuple[tuple[str, Any], ...]] = {}


def _passing(functions: Mapping[str, Callable[..., Any]]) -> tuple[tuple[str, Any], ...]:
    """Each filter's or test's name and what the compiled code passes it first (nothing, context, ...)."""
    key = tuple(functions.items())
    passing = _PASSING.get(key)
    if passing is None:
        if len(_PASSING) >= _LIMIT:
            _PASSING.clear()
        passing = _PASSING[key] = tuple(sorted((name, _PassArg.from_obj(function)) for name, function in key))
    return passing


def _settings(environment: Environment) -> tuple[Any, ...]:
    autoescape = environment.autoescape
    return (
        type(environment),
        tuple(getattr(environment, name) for name in _SYNTAX),
        tuple(sorted(type(extension).__module__ + "." + type(extension).__qualname__ for extension in
                     environment.extensions.values())),
        autoescape if isinstance(autoescape, bool) else id(autoescape),
        None if environment.finalize is None else (id(environment.finalize), _PassArg.from_obj(environment.finalize)),
        _passing(environment.filters),
        _passing(environment.tests),
    )  # fmt: skip


def _with_filename(code: CodeType, filename: str) -> CodeType:
    """``code`` as compiled from a file named ``filename``: the name tracebacks and ``Template.filename`` show.

    The file name is not part of the generated code (only of errors raised while compiling, which are not
    kept), so the same source compiled under another name differs in ``co_filename`` alone.
    """
    constants = tuple(_with_filename(c, filename) if isinstance(c, CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=constants)


def share_compiled_code(environment: Environment) -> None:
    """Make ``environment`` reuse code compiled by any environment with the same settings in this process.

    The settings are read at each compile, so filters registered after this call count. Only text sources are
    kept (a parsed tree is compiled as before). Copier makes no overlays of its environments; an overlay would
    inherit this environment's compile, settings included.
    """
    compile_source = environment.compile

    def compile_once(
        source: Any, name: str | None = None, filename: str | None = None, raw: bool = False, defer_init: bool = False
    ) -> Any:
        if not isinstance(source, str):
            return compile_source(source, name, filename, raw, defer_init)
        key = (_settings(environment), source, name, raw, defer_init)
        compiled = _COMPILED.get(key)
        if compiled is None:
            compiled = compile_source(source, name, filename, raw, defer_init)
            if len(_COMPILED) >= _LIMIT:
                _COMPILED.clear()
            _COMPILED[key] = compiled
        elif isinstance(compiled, CodeType) and compiled.co_filename != (filename or "<template>"):
            return _with_filename(compiled, filename or "<template>")  # Jinja's own default name
        return compiled

    environment.compile = compile_once  # type: ignore[method-assign]
