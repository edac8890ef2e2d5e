"""Bindings that would do nothing or the wrong thing are refused, naming both sides, before anything changes.

A model built with ``ops=`` binds its kernels around each of its calls. Distributed kernels bound for the whole
process (``bind_ops(parallel_ops(state))``) would then be replaced on every call, and each rank would train on
its own share of the loss. A kernel on a slot no code of the model reads would never run.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, PreTrainedModel, Qwen3MoeConfig

from modelgraft.models.loader import build_model
from modelgraft.models.ops import KERNEL_FAMILIES, OpsConfig, OpsConfigError, bind_ops, current_ops, unbind_ops
from modelgraft.models.ops.binding import consulted_slots
from modelgraft.models.ops.errors import OpsConflictError
from modelgraft.models.testing import causal_lm_batch, tiny_config

CHUNKED = OpsConfig({"causal_lm_loss": "chunked"})
#: Bound as ``parallel_ops`` binds it on more than one rank; never called here (its group is missing).
GLOBAL_LOSS = OpsConfig({"causal_lm_loss": "global_batch"})


@pytest.fixture(autouse=True)
def _unbound() -> None:
    unbind_ops()
    yield
    unbind_ops()


def _llama(ops: OpsConfig | None) -> PreTrainedModel:
    torch.manual_seed(0)
    return build_model(tiny_config(LlamaConfig), architecture="LlamaForCausalLM", ops=ops)


def test_every_family_of_the_distributed_package_is_marked_distributed() -> None:
    for family in KERNEL_FAMILIES.values():
        assert family.distributed == family.module.startswith("modelgraft.models.distributed."), family.name


def test_a_model_with_its_own_ops_refuses_a_call_under_process_wide_distributed_kernels() -> None:
    model = _llama(CHUNKED)
    bind_ops(GLOBAL_LOSS)
    with pytest.raises(OpsConflictError, match=r"causal_lm_loss=chunked.*causal_lm_loss=global_batch"):
        model(**causal_lm_batch(model.config))


def test_a_refused_call_leaves_the_process_wide_kernels_bound() -> None:
    model = _llama(CHUNKED)
    bind_ops(GLOBAL_LOSS)
    with pytest.raises(OpsConflictError):
        model(**causal_lm_batch(model.config))
    assert current_ops() == {"causal_lm_loss": "global_batch"}


def test_a_model_with_eager_ops_also_refuses_to_replace_distributed_kernels() -> None:
    model = _llama(OpsConfig())
    bind_ops(GLOBAL_LOSS)
    with pytest.raises(OpsConflictError, match=r"causal_lm_loss=eager"):
        model(**causal_lm_batch(model.config))


def test_a_model_runs_again_once_the_distributed_kernels_are_unbound() -> None:
    model = _llama(CHUNKED)
    batch = causal_lm_batch(model.config)
    bind_ops(GLOBAL_LOSS)
    with pytest.raises(OpsConflictError):
        model(**batch)
    unbind_ops()
    assert torch.isfinite(model(**batch).loss)


def test_build_model_with_ops_refuses_while_distributed_kernels_are_bound() -> None:
    bind_ops(GLOBAL_LOSS)
    with pytest.raises(OpsConflictError, match=r"parallel_ops\(state, base=<its ops>\)"):
        _llama(CHUNKED)
    assert current_ops() == {"causal_lm_loss": "global_batch"}


def test_build_model_without_ops_leaves_the_distributed_kernels_to_the_model() -> None:
    bind_ops(GLOBAL_LOSS)
    model = _llama(None)
    assert model.ops_config is None
    assert current_ops() == {"causal_lm_loss": "global_batch"}


def test_a_dense_model_reads_no_experts_slot() -> None:
    model = _llama(None)
    assert "rms_norm" in consulted_slots(model)
    assert "moe_experts" not in consulted_slots(model)


def test_a_kernel_on_a_slot_the_model_never_consults_is_refused_when_bound() -> None:
    with pytest.raises(
        OpsConfigError, match=r"LlamaForCausalLM has no structure that consults op slot\(s\) moe_experts"
    ):
        _llama(OpsConfig({"moe_experts": "grouped"}))


def test_a_refused_build_leaves_the_bindings_it_found() -> None:
    bind_ops(CHUNKED)
    with pytest.raises(OpsConfigError):
        _llama(OpsConfig({"moe_experts": "grouped"}))
    assert current_ops() == {"causal_lm_loss": "chunked"}


def test_the_experts_kernel_binds_on_a_moe_model() -> None:
    config = tiny_config(Qwen3MoeConfig, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=12)
    model = build_model(config, architecture="Qwen3MoeForCausalLM", ops=OpsConfig({"moe_experts": "grouped"}))
    assert "moe_experts" in consulted_slots(model)
    assert dict(model.ops_config.kernels) == {"moe_experts": "grouped"}
