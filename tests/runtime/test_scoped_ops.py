"""Ops stay with the model ``build_model`` built them into: two models, two kernels, one process."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
from transformers import MinistralConfig, PreTrainedModel

from modelgraft.models.loader import build_model
from modelgraft.models.ops import OpsConfig, OpsConfigError, bind_ops, current_ops
from modelgraft.models.ops import binding as binding_module
from modelgraft.models.ops.binding import attach_ops
from modelgraft.models.ops.kernels import chunked_loss
from modelgraft.models.testing import tiny_config

CHUNKED = OpsConfig({"causal_lm_loss": "chunked"})
EAGER = OpsConfig()


@pytest.fixture
def chunked_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Calls of the chunked loss kernel, counted (patched before any model resolves it)."""
    calls: Counter[str] = Counter()
    kernel = chunked_loss.causal_lm_loss

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls["chunked"] += 1
        return kernel(*args, **kwargs)

    monkeypatch.setattr(chunked_loss, "causal_lm_loss", counted)
    return calls


def _build(ops: OpsConfig | None) -> PreTrainedModel:
    torch.manual_seed(0)  # the same weights for every model, so their losses agree
    return build_model(tiny_config(MinistralConfig), architecture="MinistralForCausalLM", ops=ops)


def _batch() -> dict[str, torch.Tensor]:
    input_ids = torch.randint(1, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    return {"input_ids": input_ids, "labels": input_ids.clone()}


@pytest.mark.parametrize("build_chunked_first", [True, False], ids=["chunked-built-first", "eager-built-first"])
@pytest.mark.parametrize("call_chunked_first", [True, False], ids=["chunked-called-first", "eager-called-first"])
def test_two_models_each_run_their_own_kernel(
    slot_guarded_generated: str, chunked_calls: Counter[str], build_chunked_first: bool, call_chunked_first: bool
) -> None:
    if build_chunked_first:
        chunked, eager = _build(CHUNKED), _build(EAGER)
    else:
        eager, chunked = _build(EAGER), _build(CHUNKED)
    assert current_ops() == ({} if build_chunked_first else {"causal_lm_loss": "chunked"})  # the last one built
    batch = _batch()
    order = [(chunked, True), (eager, False)] if call_chunked_first else [(eager, False), (chunked, True)]
    losses = {}
    for _ in range(2):
        for model, is_chunked in order:
            before = chunked_calls["chunked"]
            out = model(**batch)
            out.loss.backward()
            assert chunked_calls["chunked"] == before + is_chunked
            assert (out.logits is None) is is_chunked  # the chunked loss returns no logits
            losses[is_chunked] = out.loss.detach()
    torch.testing.assert_close(losses[True], losses[False])
    assert chunked_calls["chunked"] == 2
    for model in (chunked, eager):
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_a_call_restores_the_bindings_it_found(slot_guarded_generated: str, chunked_calls: Counter[str]) -> None:
    eager = _build(EAGER)
    bind_ops(CHUNKED)
    assert eager(**_batch()).logits is not None  # its own (eager) ops, not the global chunked loss
    assert current_ops() == {"causal_lm_loss": "chunked"}
    assert chunked_calls["chunked"] == 0
    assert binding_module._ACTIVE == []


def test_an_exception_in_a_call_restores_the_bindings(
    slot_guarded_generated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("kernel failed")

    monkeypatch.setattr(chunked_loss, "causal_lm_loss", failing)
    chunked = _build(CHUNKED)
    bind_ops(EAGER)
    with pytest.raises(RuntimeError, match="kernel failed"):
        chunked(**_batch())
    assert current_ops() == {}
    assert binding_module._ACTIVE == []


def test_the_model_reports_its_ops(slot_guarded_generated: str) -> None:
    assert _build(CHUNKED).ops_config == CHUNKED
    assert _build(EAGER).ops_config == EAGER
    assert _build(None).ops_config is None


def test_a_model_built_without_ops_runs_the_global_binding(
    slot_guarded_generated: str, chunked_calls: Counter[str]
) -> None:
    model = _build(None)
    assert model(**_batch()).logits is not None
    bind_ops(CHUNKED)
    assert model(**_batch()).logits is None
    assert chunked_calls["chunked"] == 1


def _record_bindings(module: torch.nn.Module, seen: list[dict[str, str]]) -> Callable[[], None]:
    handle = module.register_forward_pre_hook(lambda _module, _args: seen.append(current_ops()))
    return handle.remove


def test_a_submodule_called_alone_runs_under_the_models_ops(slot_guarded_generated: str) -> None:
    chunked = _build(CHUNKED)
    bind_ops(EAGER)
    seen: list[dict[str, str]] = []
    _record_bindings(chunked.model.norm, seen)
    chunked.model(input_ids=_batch()["input_ids"])
    assert seen == [{"causal_lm_loss": "chunked"}]
    assert current_ops() == {}


def test_gradient_checkpointing_recomputes_under_the_models_ops(slot_guarded_generated: str) -> None:
    """The recompute runs in backward, after the model's call returned; the layers still see its ops."""
    chunked = _build(CHUNKED).train()
    chunked.gradient_checkpointing_enable()
    bind_ops(EAGER)
    seen: list[dict[str, str]] = []
    for layer in chunked.model.layers:
        _record_bindings(layer.mlp, seen)
    out = chunked(**_batch())
    assert current_ops() == {}
    out.loss.backward()
    assert len(seen) == 2 * len(chunked.model.layers)  # forward, then the recompute in backward
    assert all(ops == {"causal_lm_loss": "chunked"} for ops in seen)
    assert current_ops() == {}


def test_a_model_keeps_the_ops_it_was_built_with(slot_guarded_generated: str) -> None:
    with pytest.raises(OpsConfigError, match="already runs under ops"):
        attach_ops(_build(CHUNKED), EAGER)
    model = _build(None)
    assert attach_ops(model, CHUNKED) is model
    assert model.ops_config == CHUNKED


def test_a_model_built_with_ops_deep_copies_and_keeps_them() -> None:
    """EMA and reference copies deep-copy a model; its ops come along."""
    import copy

    from modelgraft.models.loader import build_model
    from modelgraft.models.ops import OpsConfig
    from modelgraft.models.testing import tiny_config

    ops = OpsConfig({"causal_lm_loss": "chunked"})
    config = tiny_config(__import__("transformers").LlamaConfig)
    model = build_model(config, architecture="LlamaForCausalLM", ops=ops)
    twin = copy.deepcopy(model)
    assert twin.ops_config == ops
