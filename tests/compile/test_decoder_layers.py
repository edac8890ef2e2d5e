"""The zoo's decoder layers the parity suites do not compile: traced as one graph, and each CPU family in bf16.

``layers.LAYERS`` takes the first decoder layer of each text and hybrid model of the zoo, the first sparse one of a
MoE model, and the first layer calling a slot none of those calls. The first and first sparse layers are their
model's parity suite's (``layer_compile.check_first_layers_compile``: traced in every kernel case with no more graph
breaks than upstream's, none at this pin, and trained compiled in fp32); a test here checks that each one's suite
runs the check. Here, for every layer taken for the slots it calls and every kernel case of it (slots unbound, the
reference kernels, the CPU kernel families the layer calls), ``layer_compile.graph_breaks`` finds no graph break; and
compiled by ``torch.compile(layer, fullgraph=True, backend="aot_eager")``, each CPU family in bf16 on the first
layer that calls it gives the eager outputs, input gradient and every parameter's gradient within
``layers.TOLERANCES`` (bf16: rtol 1.6e-2, atol 1e-5): the casts inside a kernel are ours, and the same in every
layer; upstream's code traces the same operators in either dtype. A compile costs 0.7 to 3 s, which is what keeps
the matrix to this (docs/compile.md, "How the tests check it").

``grouped_compiled`` (``grouped``'s operators, with a block of their backward compiled by inductor at run time) is
not in the matrix: it traces as ``grouped`` does; test_kernels.py traces and compiles a sparse layer with it.
"""

from __future__ import annotations

import pytest
import torch

from modelgraft.models.testing.declarations import parity_suite_class
from modelgraft.models.testing.dense_suite import DenseParitySuite
from modelgraft.models.testing.layer_compile import graph_breaks
from modelgraft.models.testing.vlm_suite import VlmParitySuite

from .layers import (
    CPU_FAMILIES,
    LAYERS,
    LayerCase,
    assert_steps_match,
    bound,
    kernel_cases,
    layer_and_inputs,
    training_step,
)

#: Dynamo warns when it traces through ``functools.cache``: the reference kernels look their activation up through
#: one (``eager.activation_module``), which gives the same activation for a name every time, so tracing through it is sound.
pytestmark = pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")

#: The layers traced here in every kernel case: those taken for the slots they call. A text or hybrid model's
#: first and first sparse layers are its parity suite's, which traces them in every kernel case and trains them
#: compiled in fp32 (``layer_compile.check_first_layers_compile``).
TRACED = [layer for layer in LAYERS if not layer.in_parity_suite]

CASES = [
    pytest.param(layer, kernels, id=f"{layer.id}-{kernels}") for layer in TRACED for kernels in kernel_cases(layer)
]


def _first_layer_calling(family: str) -> LayerCase:
    return next(layer for layer in LAYERS if layer.compiled and family in kernel_cases(layer)[-1].split("+"))


#: Each CPU family in bf16, on the first layer that calls it (fp32 runs are the parity suites').
COMPILED = [
    pytest.param(
        _first_layer_calling(family), family, torch.bfloat16, id=f"{_first_layer_calling(family).id}-{family}-bf16"
    )
    for family in CPU_FAMILIES
    if any(layer.compiled and family in kernel_cases(layer)[-1].split("+") for layer in LAYERS)
]

#: The parity suites' compile check, as the text and the VLM (and Omni) suites define it.
SUITE_CHECKS = (
    DenseParitySuite.test_first_decoder_layers_trace_as_upstreams_do_and_train_compiled_as_eagerly,
    VlmParitySuite.test_first_text_decoder_layers_trace_as_upstreams_do_and_train_compiled_as_eagerly,
)


def test_the_layers_cover_dense_sparse_and_linear_attention_layers_and_every_cpu_family() -> None:
    roles = {(layer.package, layer.role) for layer in LAYERS}
    assert {("llama", "first"), ("qwen3_moe", "first"), ("deepseek_v3", "first sparse"), ("qwen3_5", "first")} <= roles
    assert ("qwen3_5", "calls rope") in roles  # the hybrid model's first full-attention layer
    reached = {family for layer in LAYERS for kernels in kernel_cases(layer) for family in kernels.split("+")}
    # The loss (chunked) is not a layer's: tests/compile/test_kernels.py compiles it on its own.
    assert reached >= {"unbound", "reference", *(family for family in CPU_FAMILIES if family != "chunked")}


def test_a_layer_left_to_its_models_parity_suite_is_compiled_there() -> None:
    left = [layer for layer in LAYERS if layer.in_parity_suite]
    taken = {(layer.package, layer.index) for layer in left}
    assert {("llama", 0), ("qwen3_moe", 0), ("deepseek_v3", 1), ("qwen3_5", 0), ("qwen3_5_moe", 0)} <= taken
    for layer in left:
        suite = parity_suite_class(layer.package)
        assert any(getattr(suite, check.__name__, None) is check for check in SUITE_CHECKS), suite


@pytest.mark.parametrize(("layer", "kernels"), CASES)
def test_the_layer_traces_as_one_graph(layer: LayerCase, kernels: str) -> None:
    module, args, kwargs = layer_and_inputs(layer, torch.float32)
    with bound(layer, kernels):
        assert graph_breaks(module, (args, kwargs)) == []


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
