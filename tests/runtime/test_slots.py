"""Op slots: unbound means eager, binding routes calls, and the names generated code relies on exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import modelgraft.models.ops
from modelgraft.models.ops import SLOTS, OpsConfig, OpSlot, UnboundSlotError, bound_ops, rms_norm_slot
from modelgraft.models.testing.preloaded_python import run_code

#: The slot instances generated modeling files import by these exact names.
GENERATED_CODE_SLOT_NAMES = {
    "activation_slot": "activation",
    "layer_norm_slot": "layer_norm",
    "rms_norm_slot": "rms_norm",
    "glu_activation_slot": "glu_activation",
    "rope_slot": "rope",
    "rope_vision_slot": "rope_vision",
    "causal_lm_loss_slot": "causal_lm_loss",
    "sequence_classification_loss_slot": "sequence_classification_loss",
    "moe_experts_slot": "moe_experts",
    "load_balancing_loss_slot": "load_balancing_loss",
    "hyper_connection_slot": "hyper_connection",
    "sinkhorn_slot": "sinkhorn",
    "hyper_connection_post_slot": "hyper_connection_post",
    "hyper_head_slot": "hyper_head",
    "hash_router_slot": "hash_router",
    "correction_bias_router_slot": "correction_bias_router",
    "lightning_indexer_slot": "lightning_indexer",
    "group_limited_router_slot": "group_limited_router",
    "gated_mlp_slot": "gated_mlp",
    "dsa_indexer_slot": "dsa_indexer",
    "softmax_topk_router_slot": "softmax_topk_router",
    "topk_softmax_router_slot": "topk_softmax_router",
    "rms_norm_gated_slot": "rms_norm_gated",
    "causal_conv1d_slot": "causal_conv1d",
    "causal_conv1d_update_slot": "causal_conv1d_update",
    "chunk_gated_delta_rule_slot": "chunk_gated_delta_rule",
    "recurrent_gated_delta_rule_slot": "recurrent_gated_delta_rule",
    "placeholder_features_slot": "placeholder_features",
}


def test_generated_code_slot_names_are_exported() -> None:
    for attribute, slot_name in GENERATED_CODE_SLOT_NAMES.items():
        slot = getattr(modelgraft.models.ops, attribute)
        assert isinstance(slot, OpSlot)
        assert slot.name == slot_name
        assert SLOTS[slot_name] is slot
    assert set(SLOTS) == set(GENERATED_CODE_SLOT_NAMES.values())


#: Run in a fresh interpreter: import everything a training process imports (every registered model's
#: generated modules, the kernels' registry, the testing harness), then report every slot that is bound.
_FRESH_PROCESS_PROBE = """
import importlib, json
import modelgraft.models
from modelgraft.models.ops import SLOTS
from modelgraft.models.registry import MODELING_REGISTRY
import modelgraft.models.testing, modelgraft.models.testing.dense_suite, modelgraft.models.testing.moe_suite
modules = set()
for model_type in MODELING_REGISTRY:
    for backend in MODELING_REGISTRY.backends(model_type):
        modules.add(MODELING_REGISTRY.module_path(model_type, backend))
for module in sorted(modules):
    importlib.import_module(module)
print(json.dumps({"modules": sorted(modules), "bound": {
    name: slot.bound_kernel_name for name, slot in SLOTS.items() if slot.use_non_eager_impl or slot.bound is not None
}}))
"""


def _fresh_process_bindings(prelude: str = "") -> dict:
    done = run_code(prelude + _FRESH_PROCESS_PROBE, cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_slots_start_unbound() -> None:
    """In a fresh interpreter (this process's fixtures unbind every slot before each test, hiding a binding
    made at import time), importing every generated module and the harness leaves every slot eager."""
    report = _fresh_process_bindings()
    assert report["modules"], "the registry lists no generated module to import"
    assert report["bound"] == {}


def test_the_fresh_interpreter_probe_sees_a_binding_made_at_import_time() -> None:
    """The probe of test_slots_start_unbound can fail: a kernel bound while importing is reported."""
    prelude = "from modelgraft.models.ops import rms_norm_slot\nrms_norm_slot.bind(abs, name='bound-at-import')\n"
    assert _fresh_process_bindings(prelude)["bound"] == {"rms_norm": "bound-at-import"}


def test_calling_an_unbound_slot_raises() -> None:
    with pytest.raises(UnboundSlotError, match="use_non_eager_impl"):
        rms_norm_slot(1, 2, 3)


def test_bind_routes_calls_to_the_kernel() -> None:
    slot = OpSlot("test")
    slot.bind(lambda x, *, scale: x * scale, name="times")
    assert slot.use_non_eager_impl is True
    assert slot.bound_kernel_name == "times"
    assert slot(3, scale=2) == 6


def test_bind_defaults_the_name_to_the_qualified_kernel_name() -> None:
    slot = OpSlot("test")
    slot.bind(max)
    assert slot.bound_kernel_name == "builtins.max"


def test_unbind_returns_to_eager() -> None:
    slot = OpSlot("test")
    slot.bind(abs)
    slot.unbind()
    assert slot.use_non_eager_impl is False
    with pytest.raises(UnboundSlotError):
        slot(-1)


def test_bind_rejects_a_non_callable() -> None:
    with pytest.raises(TypeError, match="callable"):
        OpSlot("test").bind("not a kernel")  # type: ignore[arg-type]


def test_a_binding_records_the_options_its_kernel_was_given_and_a_scope_restores_them() -> None:
    """A forward may ask how a slot is bound (a both-ways VLM reads the size of the placeholder kernel's group)."""
    chunked = OpsConfig({"causal_lm_loss": "chunked"}, kernel_options={"causal_lm_loss": {"chunk_size": 8}})
    with bound_ops(chunked):
        assert SLOTS["causal_lm_loss"].bound.options == {"chunk_size": 8}
        with bound_ops(OpsConfig()):
            assert SLOTS["causal_lm_loss"].bound is None
        assert SLOTS["causal_lm_loss"].bound.options == {"chunk_size": 8}


def test_a_kernel_bound_by_hand_records_no_options() -> None:
    slot = OpSlot("demo")
    slot.bind(lambda x: x, name="identity")
    assert slot.bound is not None and slot.bound.options == {}
