"""Copies of a function with a code object of their own, for the kernels that compile with ``torch.compile``.

Dynamo keeps the graphs it compiled, and counts recompiles against its limit (8), per code object. A kernel that
compiles one function for many sets of options (dtypes, widths, a model's formulation) would reach that limit in
a process that runs several models; a copy per set of options gives each its own count.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

__all__ = ["own_code"]


def own_code(fn: Callable[..., Any], suffix: str) -> Callable[..., Any]:
    """A copy of ``fn`` whose code object is its own (named ``<name>__<suffix>``, as dynamo's logs show it)."""
    name = f"{fn.__name__}__{suffix}"
    code = fn.__code__.replace(co_name=name, co_qualname=name)
    return types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)
