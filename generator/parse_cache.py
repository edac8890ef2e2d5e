"""Parsing a text the process has parsed before returns the tree it got then.

Planning parses many small texts more than once: a rendered snippet, the same text cut back out of it
at column 0, each re-indented upstream body it verifies, and the same again for a sibling config
(GPU and NPU) that patches the same upstream members. A tree depends on nothing but its text, so a
memo keyed by the text is no run state: an edited file is a different text, parsed afresh.

The trees are shared: the engine only reads them, and nothing may change one in place.
"""

from __future__ import annotations

import ast
from functools import lru_cache


@lru_cache(maxsize=1024)
def parse(text: str) -> ast.Module:
    """``ast.parse(text)``, once per distinct text; raises SyntaxError as it does (failures are not kept)."""
    return ast.parse(text)
