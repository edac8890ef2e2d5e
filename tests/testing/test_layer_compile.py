"""The parity suites' compile check (``layer_compile.check_first_layers_compile``) fails where a generated layer breaks
its graph and upstream's does not, and only there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from modelgraft.models.loader import get_model_class
from modelgraft.models.testing import build_pair, causal_lm_batch, layer_compile, tiny_config
from modelgraft.models.testing.layer_compile import (
    check_first_layers_compile,
    decoder_layers,
    first_layers,
    graph_breaks,
)
from modelgraft.models.testing.parity import eager_slots_on_one_thread

ARCHITECTURE = "LlamaForCausalLM"


@pytest.fixture(autouse=True)
def _eager_slots() -> Iterator[None]:
    with eager_slots_on_one_thread():
        yield


def _pair() -> tuple[nn.Module, nn.Module, dict[str, torch.Tensor]]:
    from transformers import LlamaConfig

    config = tiny_config(LlamaConfig)
    upstream_cls = get_model_class("llama", ARCHITECTURE, use_hf=True)
    pair = build_pair(config, upstream_cls, get_model_class("llama", ARCHITECTURE))
    return pair.upstream, pair.generated, causal_lm_batch(config)


def _break_first_layer(model: nn.Module) -> None:
    """Make the first decoder layer break dynamo's graph once per call, as an untraceable guard would."""
    layer = decoder_layers(model)[0]
    parent = type(layer)

    def forward(self: nn.Module, hidden_states: torch.Tensor, *args: object, **kwargs: object) -> object:
        hidden_states = hidden_states + 0
        torch._dynamo.graph_break()
        return parent.forward(self, hidden_states, *args, **kwargs)

    layer.__class__ = type("BrokenDecoderLayer", (parent,), {"forward": forward})


def _loop_over_routed_rows(model: nn.Module) -> None:
    """Make the first decoder layer loop over the rows a run-time test selects, as DBRX's experts loop over the experts
    a batch routes to: ``fullgraph=True`` raises ``UserError`` there (a data-dependent loop), not ``Unsupported``."""
    layer = decoder_layers(model)[0]
    parent = type(layer)

    def forward(self: nn.Module, hidden_states: torch.Tensor, *args: object, **kwargs: object) -> object:
        with torch.no_grad():
            routed = torch.greater(hidden_states.sum(-1).flatten(), 0).nonzero()
        for _ in routed:
            hidden_states = hidden_states * 1.0
        return parent.forward(self, hidden_states, *args, **kwargs)

    layer.__class__ = type("RoutedDecoderLayer", (parent,), {"forward": forward})


def test_a_generated_layer_breaking_where_upstreams_does_not_fails_the_check_naming_the_break() -> None:
    upstream, generated, batch = _pair()
    _break_first_layer(generated)
    with pytest.raises(AssertionError, match=r"decoder layer 0 with unbound kernels breaks its graph 1 times"):
        check_first_layers_compile(upstream, generated, batch)


def test_a_generated_layer_breaking_only_where_upstreams_does_passes_and_trains_compiled() -> None:
    upstream, generated, batch = _pair()
    _break_first_layer(upstream)
    _break_first_layer(generated)
    check_first_layers_compile(upstream, generated, batch)


def test_a_data_dependent_loop_upstreams_layer_has_too_is_counted_as_its_breaks_and_trains_compiled() -> None:
    upstream, generated, batch = _pair()
    _loop_over_routed_rows(upstream)
    _loop_over_routed_rows(generated)
    check_first_layers_compile(upstream, generated, batch)


def test_a_data_dependent_loop_in_the_generated_layer_alone_fails_the_check_naming_it() -> None:
    upstream, generated, batch = _pair()
    _loop_over_routed_rows(generated)
    with pytest.raises(
        AssertionError, match=r"decoder layer 0 with unbound kernels breaks its graph 1 times.*Dynamic"
    ):
        check_first_layers_compile(upstream, generated, batch)


class _BreaksFirst(nn.Module):
    """Breaks the graph before any operation: ``explain`` lists no break and counts one graph."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return hidden_states * 2


class _BreaksAfterAnOperation(nn.Module):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = hidden_states + 1
        torch._dynamo.graph_break()
        return hidden_states * 2


def test_a_break_before_any_traced_operation_is_found_by_its_reason() -> None:
    assert graph_breaks(_BreaksFirst(), ((torch.ones(2),), {})) == [
        "Call to `torch._dynamo.graph_break()` (before any traced operation)"
    ]


def test_a_break_after_an_operation_is_found_at_its_site() -> None:
    (found,) = graph_breaks(_BreaksAfterAnOperation(), ((torch.ones(2),), {}))
    assert found.startswith("Call to `torch._dynamo.graph_break()` at ")
    assert found.endswith(f"test_layer_compile.py:{_BreaksAfterAnOperation.forward.__code__.co_firstlineno + 2}")


def test_a_moe_models_first_sparse_layer_is_taken_after_its_dense_first_layer() -> None:
    from transformers import Qwen3MoeConfig

    config = tiny_config(Qwen3MoeConfig, mlp_only_layers=[0], num_hidden_layers=3)
    model = get_model_class("qwen3_moe", "Qwen3MoeForCausalLM")(config)
    assert first_layers(decoder_layers(model)) == [0, 1]


def test_a_compiled_failure_upstreams_layer_shares_skips_the_check_naming_the_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where PyTorch or upstream's code fails compiled, the generated layer cannot do better: the check says so."""
    upstream, generated, batch = _pair()

    def fails(layer: nn.Module, inputs: object, *, fullgraph: bool) -> None:
        raise RuntimeError("view size is not compatible with input tensor's size and stride")

    monkeypatch.setattr(layer_compile, "compiled_step", fails)
    with pytest.raises(pytest.skip.Exception, match=r"upstream's own layer fails compiled .*RuntimeError: view size"):
        check_first_layers_compile(upstream, generated, batch)


def test_a_compiled_failure_of_the_generated_layer_alone_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    upstream, generated, batch = _pair()
    compiled_step = layer_compile.compiled_step

    def fails_generated(layer: nn.Module, inputs: layer_compile.LayerInputs, *, fullgraph: bool) -> object:
        if type(layer).__module__.startswith("modelgraft."):
            raise RuntimeError("the generated layer fails compiled")
        return compiled_step(layer, inputs, fullgraph=fullgraph)

    monkeypatch.setattr(layer_compile, "compiled_step", fails_generated)
    with pytest.raises(RuntimeError, match="the generated layer fails compiled"):
        check_first_layers_compile(upstream, generated, batch)
