"""Checks 3 and 7, on the normalized output: every used name is defined, every added import survives."""

from __future__ import annotations

import ast

from modelgraft.generator.codegen.tokens import before_first_definition
from modelgraft.generator.errors import ImportRemovedError, UndefinedNameError
from modelgraft.generator.normalize.ruff import Diagnostic
from modelgraft.generator.syntax import DEFINITION_NODES, import_bindings

MAX_LISTED = 10


def enclosing_member(tree: ast.Module, row: int) -> str | None:
    """Dotted name of the innermost class/function around ``row`` (``Cls.method``), if any."""
    path: list[str] = []
    body = tree.body
    while True:
        for node in body:
            if isinstance(node, DEFINITION_NODES) and node.lineno <= row <= node.end_lineno:
                path.append(node.name)
                body = node.body
                break
        else:
            return ".".join(path) or None


def check_undefined_names(config_name: str, diagnostics: tuple[Diagnostic, ...], fixed_text: str) -> None:
    """ruff F821/F811 left after fixing means the output would not import or shadows a name.

    The target named is the member of the output where the first offending line lies.
    """
    bad = [d for d in diagnostics if d.code in ("F821", "F811")]
    if bad:
        listed = "; ".join(d.describe() for d in bad[:MAX_LISTED])
        more = f" (and {len(bad) - MAX_LISTED} more)" if len(bad) > MAX_LISTED else ""
        target = enclosing_member(ast.parse(fixed_text), bad[0].row) if fixed_text else None
        raise UndefinedNameError(
            f"output uses undefined or redefined names: {listed}{more}",
            config=config_name,
            target=target or "module level",
        )


def check_imports_kept(config_name: str, text: str, imports: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
    """An add_import whose names normalization removed as unused was a mistake in the config.

    Requested imports go after upstream's last leading import (``codegen.assemble``), and ruff only
    sorts that block or removes from it: what it kept is ahead of the first top-level definition, so
    only that head of the output is parsed, not the whole module.
    """
    if not imports:
        return
    present = import_bindings(ast.parse(before_first_definition(text)).body)
    for rendered, names in imports:
        gone = [n for n in names if n not in present]
        if gone:
            raise ImportRemovedError(
                f"add_import '{rendered}': {', '.join(gone)} unused in the output, so normalization removes it; drop the import or use it",
                config=config_name,
                target=rendered,
            )
