"""Slot bindings under torch.compile: a slot guard becomes a dynamo guard on the slot's binding.

A compiled layer is traced with the bindings of its first call; a kernel bound afterwards fails that guard, so
the next call recompiles and runs it, and unbinding returns to the first graph. A model built with its own
ops (``build_model(..., ops=...)``) keeps them with its layers compiled: each compiled layer runs the model's
kernels, and the process's bindings are as they were after the call.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from modelgraft.models.loader import build_model
from modelgraft.models.ops import SLOTS, OpsConfig, current_ops
from modelgraft.models.ops.kernels import eager
from modelgraft.models.testing.declarations import parity_declaration

from .layers import LAYERS, layer_and_inputs


def test_a_kernel_bound_after_compiling_runs_in_the_compiled_layer() -> None:
    layer, args, kwargs = layer_and_inputs(next(case for case in LAYERS if case.package == "llama"), torch.float32)
    calls: Counter[str] = Counter()

    def counted_rms_norm(*arguments: Any, **options: Any) -> torch.Tensor:
        calls["rms_norm"] += 1
        return eager.rms_norm(*arguments, **options)

    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    with torch.no_grad():
        unbound = compiled(*args, **kwargs)
        SLOTS["rms_norm"].bind(counted_rms_norm, name="counted")
        rebound = compiled(*args, **kwargs)
        after_bind = calls["rms_norm"]
        SLOTS["rms_norm"].unbind()
        compiled(*args, **kwargs)

    assert after_bind == 2  # the layer's two norms, through the kernel bound after the first compile
    assert calls["rms_norm"] == after_bind  # unbound again: upstream's code, the kernel no longer runs
    torch.testing.assert_close(rebound, unbound, rtol=1.3e-6, atol=1e-5)


def test_a_model_built_with_its_ops_runs_them_in_its_compiled_layers() -> None:
    declaration = parity_declaration("qwen3_moe")
    torch.manual_seed(0)
    model = build_model(
        declaration.config(experts_implementation="batched_mm"),
        architecture=declaration.causal_lm,
        ops=OpsConfig({"moe_experts": "grouped"}),
    )
    SLOTS["moe_experts"].unbind()  # build_model bound them process-wide too: the model's scope must do it alone
    ids = torch.randint(3, 20, (2, 7), generator=torch.Generator().manual_seed(0))
    graphs: list[torch.fx.GraphModule] = []

    def capture(graph: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(graph)
        return graph.forward

    with torch.no_grad():
        expected = model(input_ids=ids, use_cache=False).logits
        for layer in model.model.layers:
            layer.compile(fullgraph=True, backend=capture)
        actual = model(input_ids=ids, use_cache=False).logits

    grouped = torch.ops.modelgraft.grouped_experts_fwd.default
    sparse = [type(layer.mlp).__name__.endswith("SparseMoeBlock") for layer in model.model.layers]
    assert [[node.target for node in graph.graph.nodes].count(grouped) for graph in graphs] == sparse
    assert current_ops() == {}
    torch.testing.assert_close(actual, expected, rtol=1.3e-6, atol=1e-5)
