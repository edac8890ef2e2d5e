"""Layers compiled one by one while the model records outputs: router logits for the aux loss, hidden states,
attentions (``modelgraft.models.compiling.compile_layers``, ``modelgraft.models.output_capture``).

Upstream records them through hooks that read a ``ContextVar``, which dynamo cannot trace: a layer compiled with
``fullgraph=True`` fails in a forward that records anything. With ``compile_layers`` every layer of a deep model is
one graph, compiled once, and the loss, aux loss, recorded outputs and every gradient are the eager model's.

The collector is replaced process-wide; each test here puts upstream's back afterwards, so the other compile tests
see upstream's hooks as a user who never calls ``compile_layers`` does.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters
from transformers.utils import output_capturing

from modelgraft.models.compiling import compile_layers
from modelgraft.models.loader import build_model
from modelgraft.models.output_capture import trace_recorded_outputs
from modelgraft.models.testing.declarations import parity_declaration

#: Deeper than any layer count a guard on the collector's lists could hide in: one graph must serve every layer.
LAYERS = 4


def _model(package: str, **overrides: Any) -> nn.Module:
    declaration = parity_declaration(package)
    torch.manual_seed(0)
    return build_model(declaration.config(**overrides), architecture=declaration.causal_lm)


def _qwen3_moe(layers: int = LAYERS) -> nn.Module:
    return _model("qwen3_moe", num_hidden_layers=layers, experts_implementation="batched_mm")


def _ids() -> torch.Tensor:
    return torch.randint(3, 20, (2, 7), generator=torch.Generator().manual_seed(0))


def _step(model: nn.Module, **recorded: bool) -> tuple[Any, dict[str, torch.Tensor]]:
    """One training step's outputs and every parameter's gradient."""
    model.zero_grad(set_to_none=True)
    ids = _ids()
    out = model(input_ids=ids, labels=ids, use_cache=False, **recorded)
    loss = out.loss + out.aux_loss if recorded.get("output_router_logits") else out.loss
    loss.backward()
    return out, {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def _assert_grads_equal(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for name, grad in expected.items():
        torch.testing.assert_close(actual[name], grad, rtol=1.3e-6, atol=1e-5, msg=name)


@pytest.mark.upstream_facts
def test_upstreams_hooks_fail_a_layer_compiled_whole_graph_in_a_forward_recording_router_logits() -> None:
    model = _qwen3_moe()
    for layer in model.model.layers:
        layer.compile(fullgraph=True, backend="aot_eager")
    with pytest.raises(torch._dynamo.exc.Unsupported, match="ContextVar"):
        _step(model, output_router_logits=True)


def test_compiled_layers_record_router_logits_and_train_as_eager_layers_do() -> None:
    model = _qwen3_moe()
    eager = copy.deepcopy(model)
    compile_layers(model.model.layers, fullgraph=True, backend="aot_eager")

    expected, expected_grads = _step(eager, output_router_logits=True)
    actual, grads = _step(model, output_router_logits=True)

    assert len(actual.router_logits) == len(expected.router_logits) > 1
    for logits, eager_logits in zip(actual.router_logits, expected.router_logits, strict=True):
        torch.testing.assert_close(logits, eager_logits, rtol=1.3e-6, atol=1e-5)
    torch.testing.assert_close(actual.loss, expected.loss, rtol=1.3e-6, atol=1e-5)
    torch.testing.assert_close(actual.aux_loss, expected.aux_loss, rtol=1.3e-6, atol=1e-5)
    _assert_grads_equal(grads, expected_grads)


def test_every_layer_of_a_deep_model_runs_one_graph_of_its_kind_compiled_once() -> None:
    model = _qwen3_moe()
    kinds = {type(layer.mlp) for layer in model.model.layers}  # the tiny config's dense first layer, then sparse
    compile_layers(model.model.layers, fullgraph=True, backend="aot_eager")
    counters.clear()
    for _ in range(2):
        _step(model, output_router_logits=True)
    assert counters["stats"]["unique_graphs"] == len(kinds)


def test_compiled_layers_record_hidden_states_and_attentions_as_eager_layers_do() -> None:
    model = _model("llama", num_hidden_layers=3)  # eager attention: sdpa warns under output_attentions
    eager = copy.deepcopy(model)
    compile_layers(model.model.layers, fullgraph=True, backend="aot_eager")

    recorded = {"output_hidden_states": True, "output_attentions": True}
    expected, expected_grads = _step(eager, **recorded)
    actual, grads = _step(model, **recorded)

    for key in ("hidden_states", "attentions"):
        assert len(getattr(actual, key)) == len(getattr(expected, key))
        for tensor, eager_tensor in zip(getattr(actual, key), getattr(expected, key), strict=True):
            torch.testing.assert_close(tensor, eager_tensor, rtol=1.3e-6, atol=1e-5)
    _assert_grads_equal(grads, expected_grads)


def test_a_hook_on_the_layer_runs_outside_its_compiled_forward() -> None:
    """Upstream's recording of hidden states and a framework's own checks (``apply_fsdp``'s in-place check) hang hooks
    on each layer: they run eagerly around the compiled forward, whatever they do."""
    model = _model("llama", num_hidden_layers=2)
    compiling: list[bool] = []
    model.model.layers[0].register_forward_hook(lambda *_: compiling.append(torch.compiler.is_compiling()))
    compile_layers(model.model.layers, fullgraph=True, backend="aot_eager")
    _step(model)
    assert compiling == [False]


def test_a_copy_of_a_model_with_compiled_layers_runs_its_own_weights() -> None:
    """An EMA copy is a ``copy.deepcopy`` of the trained model: its compiled layers must read the copy's weights."""
    model = _model("llama", num_hidden_layers=2)
    eager = copy.deepcopy(model)
    compile_layers(model.model.layers, fullgraph=True, backend="aot_eager")
    copied = copy.deepcopy(model)
    ids = _ids()
    with torch.no_grad():
        for parameter in (*copied.parameters(), *eager.parameters()):
            parameter.mul_(0.5)
        torch.testing.assert_close(copied(input_ids=ids).logits, eager(input_ids=ids).logits, rtol=1.3e-6, atol=1e-5)


def test_the_whole_model_compiled_records_through_the_replaced_collector() -> None:
    """Upstream's own path under a compile of the whole model still works once the collector is replaced."""
    model = _qwen3_moe(layers=3)
    eager = copy.deepcopy(model)
    trace_recorded_outputs()
    compiled = torch.compile(model, backend="eager")
    expected, _ = _step(eager, output_router_logits=True)
    actual, _ = _step(compiled, output_router_logits=True)
    assert len(actual.router_logits) == len(expected.router_logits) > 1
    torch.testing.assert_close(actual.aux_loss, expected.aux_loss, rtol=1.3e-6, atol=1e-5)


def test_replacing_the_collector_is_idempotent_and_keeps_a_running_collection() -> None:
    running = {"router_logits": []}
    token = output_capturing._active_collector.set(running)
    first = trace_recorded_outputs()
    assert trace_recorded_outputs() is first
    assert output_capturing._active_collector is first
    assert first.get() is running
    first.reset(token)
    assert first.get() is None


def test_a_forward_recording_when_the_collector_is_replaced_gets_what_its_compiled_layers_record() -> None:
    running = {"router_logits": ["eager layer 0"]}
    token = output_capturing._active_collector.set(running)
    collector = trace_recorded_outputs()
    collector.staging["router_logits"].append("compiled layer 1")
    collector.reset(token)  # upstream's token: the forward began before the replacement
    assert running == {"router_logits": ["eager layer 0", "compiled layer 1"]}
    assert collector.get() is None
    assert collector.staging is None


def test_a_nested_collection_restores_the_outer_one_and_flushes_in_order() -> None:
    collector = trace_recorded_outputs()
    outer = {"router_logits": []}
    outer_token = collector.set(outer)
    collector.staging["router_logits"].append("layer 0")
    collector.flush()
    inner = {"router_logits": []}
    inner_token = collector.set(inner)
    collector.staging["router_logits"].append("inner layer")
    collector.reset(inner_token)  # resetting flushes what the inner forward's compiled layers left
    collector.staging["router_logits"].append("layer 1")
    collector.reset(outer_token)
    assert inner == {"router_logits": ["inner layer"]}
    assert outer == {"router_logits": ["layer 0", "layer 1"]}
    assert collector.get() is None


def test_compiled_code_reads_the_running_hidden_states_list_itself() -> None:
    """The hidden states' hook counts what its list holds (the first entry is the first layer's input): a staging
    list, empty at every layer, would record that input again for each layer."""
    collector = trace_recorded_outputs()
    running = {"hidden_states": [], "router_logits": []}
    token = collector.set(running)
    assert collector.staging["hidden_states"] is running["hidden_states"]
    assert collector.staging["router_logits"] is not running["router_logits"]
    running["hidden_states"].append("embeddings")
    collector.flush()
    collector.reset(token)
    assert running == {"hidden_states": ["embeddings"], "router_logits": []}


def test_a_collector_of_another_kind_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output_capturing, "_active_collector", object())
    with pytest.raises(TypeError, match="_active_collector is object, not the CompileableContextVar"):
        trace_recorded_outputs()
