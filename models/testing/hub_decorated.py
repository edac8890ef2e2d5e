"""Upstream's torch bodies from under its hub decorators, for the tests and benchmarks that compare kernels with them.

Upstream decorates the torch fallbacks of its linear-attention layers (Qwen3.5's ``torch_chunk_gated_delta_rule``,
``causal_conv1d_fn``, ...) with ``use_kernel_func_from_hub_with_fallback``: a ``functools.wraps`` wrapper that runs
FLA or causal-conv1d instead where the package is installed and supports the inputs' device (and refuses
``cu_seqlens`` where it cannot run), itself handed to ``use_kernel_forward_from_hub``, which, with the ``kernels``
package installed, turns the function into an instance of a one-off ``nn.Module`` class whose ``forward`` calls it.
The generated model's eager path is the torch body under both: what the linear-attention kernels recompute.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

__all__ = ["torch_body"]


def torch_body(decorated: Any) -> Callable[..., Any]:
    """The undecorated function under ``decorated``: the function a ``kernels`` function module calls, unwrapped.

    A TypeError when ``decorated`` is a module that does not hold its function where ``kernels`` keeps it (the
    free variable ``func`` of its class's ``forward``), so a change of ``kernels`` fails here, not as a silent
    comparison with whatever the hub bound.
    """
    function = decorated
    if isinstance(function, nn.Module):
        forward = type(function).forward
        cells = dict(zip(forward.__code__.co_freevars, forward.__closure__ or (), strict=True))
        if "func" not in cells:
            raise TypeError(f"{type(function).__qualname__} is no kernels function module: its forward has no 'func'")
        function = cells["func"].cell_contents
    return inspect.unwrap(function)
