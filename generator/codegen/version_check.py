"""What ``PatchConfig.require_upstream_version`` adds to an output: the check's import and one call of it.

The call names the upstream distribution, the exact version the run generates against (the header's) and
``__name__``; it goes right after the imports, before every post-import block and helper, so nothing of the
module runs under another version (docs/design.md, "Generated from one upstream version").
"""

from __future__ import annotations

from modelgraft.generator.dsl.patches import ImportSpec


def version_check_import(check: str) -> ImportSpec:
    """``from <module> import <function>`` for the dotted ``check``."""
    module, _, name = check.rpartition(".")
    return ImportSpec(module, (name,))


def version_check_call(check: str | None, distribution: str, version: str) -> str:
    """The statement that runs ``check`` at import (empty when the config asks for none)."""
    if check is None:
        return ""
    return f"{check.rpartition('.')[2]}({distribution!r}, {version!r}, __name__)\n"
