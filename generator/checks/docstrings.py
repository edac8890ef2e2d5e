"""Check 4: an override of an ``@auto_docstring`` method documents every parameter it adds.

transformers' ``auto_docstring`` fills in documented upstream parameters but
warns at import time for ones it does not know; a new parameter therefore
needs its own entry (``name (`type`): ...``) in the override's docstring.
"""

from __future__ import annotations

import ast

from modelgraft.generator.checks.signature import parameters
from modelgraft.generator.codegen.plan import Plan
from modelgraft.generator.errors import DocstringError
from modelgraft.generator.syntax import FUNCTION_NODES, decorator_name


def documented(docstring: str, name: str) -> bool:
    """True when some docstring line starts an entry for ``name``."""
    for line in docstring.splitlines():
        text = line.strip()
        if text.startswith((f"{name} (", f"{name}:", f"{name} :")):
            return True
    return False


def check_docstrings(plan: Plan) -> None:
    for resolved in plan.all_resolved():
        upstream, source = resolved.upstream, resolved.source
        if not isinstance(upstream, FUNCTION_NODES) or source is None:
            continue
        if "auto_docstring" not in {decorator_name(d) for d in upstream.decorator_list}:
            continue
        keep = resolved.patch.keep_decorators
        if keep is False or (isinstance(keep, tuple) and "auto_docstring" in keep):
            continue
        known = {p.name for p in parameters(upstream)}
        new = [
            p.name
            for p in parameters(source.node)
            if p.name not in known and p.kind not in ("var-positional", "var-keyword")
        ]
        docstring = ast.get_docstring(source.node) or ""
        missing = [name for name in new if not documented(docstring, name)]
        if missing:
            raise DocstringError(
                f"overrides an @auto_docstring method but its docstring has no entry for new parameter(s) {', '.join(missing)}",
                config=plan.config_name,
                target=resolved.patch.target,
            )
