"""RMSNorm, the rotary embedding and the gated activation, each the eager reference compiled by inductor (the
``compiled`` family).

Why: eagerly, an RMSNorm is about six element-wise operations forward (upcast, square, mean, rsqrt, two
products) and about ten backward, each a pass over the activations; the rotary embedding is two products, a
rotation and a sum per tensor, and as many backward. On a CPU each pass over a ``[tokens, hidden]`` tensor
costs about as much as the next, so a decoder layer spends more on them than their arithmetic is worth. Compiled,
each direction is one or two loops: measured on one thread, forward and backward of a ``[4, 512, 512]`` fp32
RMSNorm took 4.9 ms against 15.7 ms eagerly, and the rotary embedding of Qwen3-MoE's benchmark queries and keys
``[4, 8, 512, 64]`` and ``[4, 2, 512, 64]`` 5.1 ms against 12.0 ms (docs/performance.md, "The compiled family:
RMSNorm and the rotary embedding"). A dense MLP's gated activation ``ACT(gate) * up`` is two passes forward
(three for GELU's tanh form) and about five backward over ``[tokens, intermediate]``, the widest activations of
a dense layer; compiled, one loop each way: SiLU's of ``[4, 512, 1408]`` took 7.3 ms against 12.7 ms (the same
page, "The compiled family's gated activation"). The ``gated_mlp`` slot (an MLP guarded whole, as DeepSeek-V3's
shared experts are) keeps its three projections as ``F.linear`` around the compiled activation.

What is compiled: ``modelgraft.models.ops.kernels.eager``'s reference of each slot, so the formulas (fp32
normalization, the cast before or after the scale, rotate-half or pairs, partial rotary, the upcasts) are the
references'; inductor only fuses them, in fp32 for half-precision inputs. One compiled function per set of
options (the slot's options, dtypes and ranks), each a copy of the reference's wrapper with a code object of its
own: dynamo counts graphs against its recompile limit per code object, and a process that runs several models
(a test run) would otherwise reach it. Sizes follow torch.compile's default: a function's first graph is static,
and a call with other sizes recompiles once with those dimensions dynamic, so sequence lengths and batch sizes
share that second graph. Past the recompile limit dynamo runs the reference eagerly, which gives the same
results.

Under an outer ``torch.compile`` (a user compiling the decoder layer), the kernels call the reference as plain
torch, so the outer graph traces and fuses it with the code around it.

Binding the family needs a C++ compiler on a CPU (``$CXX``, else ``g++``), which inductor builds its code with;
``modelgraft.models.ops.kernels.KERNEL_FAMILIES`` refuses it with that reason where there is none. The first call
of each set of options compiles (about a second; inductor caches the code on disk for later processes).

Numerics: the references' formulas, reduced in inductor's order: outputs and gradients within fp32 rounding of
the eager reference in fp32, and within bf16 rounding in bf16 (tests/compile/test_compiled_references.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from modelgraft.models.ops.kernels import eager
from modelgraft.models.ops.kernels.code_objects import own_code
from modelgraft.models.ops.kernels.gated_mlp import gated_mlp_with

__all__ = ["compiled_function", "gated_mlp", "glu_activation", "rms_norm", "rope"]


def _rms_norm(hidden_states: torch.Tensor, weight: torch.Tensor | None, eps: float, options: tuple) -> torch.Tensor:
    offset, cast_last = options
    return eager.rms_norm(hidden_states, weight, eps, offset=offset, cast_last=cast_last)


def _rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, options: tuple
) -> tuple[torch.Tensor, torch.Tensor]:
    unsqueeze_dim, interleaved, repeat_cos, upcast, cast_back, upcast_terms = options
    return eager.rope(
        q,
        k,
        cos,
        sin,
        unsqueeze_dim,
        interleaved=interleaved,
        repeat_cos=repeat_cos,
        upcast=upcast,
        cast_back=cast_back,
        upcast_terms=upcast_terms,
    )


def _glu_activation(gate: torch.Tensor, up: torch.Tensor, activation: torch.nn.Module) -> torch.Tensor:
    return activation(gate) * up


_COMPILED: dict[tuple[Any, ...], Callable[..., Any]] = {}
_COMPILED_LOCK = threading.Lock()


def compiled_function(wrapper: Callable[..., Any], key: tuple[Any, ...]) -> Callable[..., Any]:
    """``wrapper`` compiled by inductor for one set of options ``key`` (made on first use, kept for the process)."""
    full_key = (wrapper.__name__, *key)
    function = _COMPILED.get(full_key)
    if function is None:
        with _COMPILED_LOCK:
            function = _COMPILED.get(full_key)
            if function is None:
                copy = own_code(wrapper, f"{len(_COMPILED)}")
                function = _COMPILED[full_key] = torch.compile(copy, backend="inductor")
    return function


def _dtype(tensor: torch.Tensor | None) -> torch.dtype | None:
    return None if tensor is None else tensor.dtype


def rms_norm(
    hidden_states: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    *,
    offset: float = 0.0,
    cast_last: bool | None = None,
) -> torch.Tensor:
    """``rms_norm`` slot contract (``modelgraft.models.ops.kernels.eager.rms_norm``), compiled by inductor."""
    options = (offset, cast_last)
    if torch.compiler.is_compiling():  # traced by an outer compile: plain torch, for its graph to fuse
        return _rms_norm(hidden_states, weight, eps, options)
    key = (hidden_states.dtype, _dtype(weight), hidden_states.dim(), hidden_states.shape[-1], eps, *options)
    return compiled_function(_rms_norm, key)(hidden_states, weight, eps, options)


def rope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int = 1,
    *,
    interleaved: bool = False,
    repeat_cos: bool = False,
    upcast: bool = False,
    cast_back: bool = False,
    upcast_terms: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``rope`` slot contract (``modelgraft.models.ops.kernels.eager.rope``), compiled by inductor."""
    options = (unsqueeze_dim, interleaved, repeat_cos, upcast, cast_back, upcast_terms)
    if torch.compiler.is_compiling():
        return _rope(q, k, cos, sin, options)
    key = (q.dtype, k.dtype, cos.dtype, q.dim(), q.shape[-1], cos.shape[-1], *options)
    return compiled_function(_rope, key)(q, k, cos, sin, options)


def glu_activation(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """``glu_activation`` slot contract (``modelgraft.models.ops.kernels.eager.glu_activation``), compiled by
    inductor."""
    if torch.compiler.is_compiling():
        return eager.glu_activation(gate, up, activation)
    key = (gate.dtype, up.dtype, gate.dim(), gate.shape[-1], activation)
    return compiled_function(_glu_activation, key)(gate, up, eager.activation_module(activation))


def gated_mlp(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    activation: str,
    *,
    gate_bias: torch.Tensor | None = None,
    up_bias: torch.Tensor | None = None,
    down_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """The whole MLP around this family's gated activation (models.ops.kernels.gated_mlp): the projections stay
    ``F.linear``, which inductor would hand to the same matmul library."""
    return gated_mlp_with(
        glu_activation,
        x,
        gate_weight,
        up_weight,
        down_weight,
        activation,
        gate_bias=gate_bias,
        up_bias=up_bias,
        down_bias=down_bias,
    )
