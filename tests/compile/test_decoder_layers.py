"""Each zoo decoder layer compiles as one graph and, compiled, trains exactly as it does eagerly.

For every layer ``layers.LAYERS`` takes (the first decoder layer of each text and hybrid model of the zoo,
the first sparse one of a MoE model, and the first layer calling a slot none of those calls) and every
kernel case of it (slots unbound, the reference kernels, the CPU kernel families the layer calls),
``torch._dynamo.explain`` finds no graph break.

Compiled by ``torch.compile(layer, fullgraph=True, backend="aot_eager")``, a layer gives the eager outputs,
input gradient and every parameter's gradient within ``layers.TOLERANCES`` (fp32: rtol 1.3e-6, atol 1e-5;
bf16: rtol 1.6e-2, atol 1e-5): every first and first sparse layer in fp32 with the kernels a CPU training
run binds (its CPU families, or none), and each CPU family in bf16 on the first of those layers that calls
it (the casts inside a kernel are ours, and the same in every layer; upstream's code traces the same
operators in either dtype). The other cases are traced, not run compiled: a compile costs 0.7 to 3 s, which
is what keeps the matrix to this (docs/compile.md, "How the tests check it").

``grouped_compiled`` (``grouped``'s operators, with a block of their backward compiled by inductor at run time) is
not in the matrix: it traces as ``grouped`` does; test_kernels.py traces and compiles a sparse layer with it.
"""

from __future__ import annotations

import pytest
import torch

from modelgraft.models.testing.declarations import parity_suite
from modelgraft.models.testing.dense_suite import DenseParitySuite

from .layers import (
    CPU_FAMILIES,
    LAYERS,
    LayerCase,
    assert_steps_match,
    bound,
    kernel_cases,
    layer_and_inputs,
    training_kernels,
    training_step,
)

#: Dynamo warns when it traces through ``functools.cache``: the reference kernels look their activation up through
#: one (``eager.activation_module``), which gives the same activation for a name every time, so tracing through it is sound.
pytestmark = pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")

#: The layers each traced in every kernel case, and run compiled in fp32, here: those the model's own parity suite
#: does not (a text model's first and first sparse layers are its suite's, ``layer_compile.check_first_layers_compile``).
HERE = [layer for layer in LAYERS if not layer.in_parity_suite]

CASES = [pytest.param(layer, kernels, id=f"{layer.id}-{kernels}") for layer in HERE for kernels in kernel_cases(layer)]


def _first_layer_calling(family: str) -> LayerCase:
    return next(layer for layer in LAYERS if layer.compiled and family in kernel_cases(layer)[-1].split("+"))


#: Every layer in fp32 with the kernels a CPU training run binds; each CPU family in bf16, on the first layer
#: that calls it.
COMPILED = [
    *(
        pytest.param(layer, training_kernels(layer), torch.float32, id=f"{layer.id}-{training_kernels(layer)}-fp32")
        for layer in HERE
        if layer.compiled
    ),
    *(
        pytest.param(
            _first_layer_calling(family), family, torch.bfloat16, id=f"{_first_layer_calling(family).id}-{family}-bf16"
        )
        for family in CPU_FAMILIES
        if any(layer.compiled and family in kernel_cases(layer)[-1].split("+") for layer in LAYERS)
    ),
]


def test_the_layers_cover_dense_sparse_and_linear_attention_layers_and_every_cpu_family() -> None:
    roles = {(layer.package, layer.role) for layer in LAYERS}
    assert {("llama", "first"), ("qwen3_moe", "first"), ("deepseek_v3", "first sparse"), ("qwen3_5", "first")} <= roles
    assert ("qwen3_5", "calls rope") in roles  # the hybrid model's first full-attention layer
    reached = {family for layer in LAYERS for kernels in kernel_cases(layer) for family in kernels.split("+")}
    # The loss (chunked) is not a layer's: tests/compile/test_kernels.py compiles it on its own.
    assert reached >= {"unbound", "reference", *(family for family in CPU_FAMILIES if family != "chunked")}


def test_a_layer_left_to_its_models_parity_suite_is_compiled_there() -> None:
    left = [layer for layer in LAYERS if layer.in_parity_suite]
    assert {("llama", 0), ("qwen3_moe", 0), ("deepseek_v3", 1)} <= {(layer.package, layer.index) for layer in left}
    for layer in left:
        suite = type(parity_suite(layer.package))
        check = suite.test_first_decoder_layers_trace_as_upstreams_do_and_train_compiled_as_eagerly
        assert check is DenseParitySuite.test_first_decoder_layers_trace_as_upstreams_do_and_train_compiled_as_eagerly


@pytest.mark.parametrize(("layer", "kernels"), CASES)
def test_the_layer_traces_as_one_graph(layer: LayerCase, kernels: str) -> None:
    module, args, kwargs = layer_and_inputs(layer, torch.float32)
    with bound(layer, kernels):
        explanation = torch._dynamo.explain(module)(*args, **kwargs)
    breaks = [
        f"{reason.reason.splitlines()[0]} at {reason.user_stack[-1].filename}:{reason.user_stack[-1].lineno}"
        if reason.user_stack
        else reason.reason.splitlines()[0]
        for reason in explanation.break_reasons
    ]
    assert (explanation.graph_break_count, breaks) == (0, [])


@pytest.mark.parametrize(("layer", "kernels", "dtype"), COMPILED)
def test_the_layer_compiled_with_aot_eager_trains_as_it_does_eagerly(
    layer: LayerCase, kernels: str, dtype: torch.dtype
) -> None:
    module, args, kwargs = layer_and_inputs(layer, dtype)
    with bound(layer, kernels):
        expected = training_step(module, module, args, kwargs)
        compiled = torch.compile(module, fullgraph=True, backend="aot_eager")
        actual = training_step(compiled, module, args, kwargs)
    assert_steps_match(actual, expected, dtype)
