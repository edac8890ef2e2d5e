"""OpsConfig validation and binding: all-or-nothing, restorable, with errors that list valid names."""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path

import pytest

from modelgraft.models.ops import (
    KERNEL_FAMILIES,
    SLOTS,
    KernelUnavailableError,
    OpsConfig,
    OpsConfigError,
    bind_ops,
    bound_ops,
    causal_lm_loss_slot,
    current_ops,
    kernel_names,
    rms_norm_slot,
    unbind_ops,
)
from modelgraft.models.ops.kernels import eager

LIGER_RUNS_HERE = KERNEL_FAMILIES["liger"].unavailable_reason() is None


def test_default_config_is_all_eager() -> None:
    ops = OpsConfig()
    assert ops.is_eager
    assert all(ops.kernel_for(slot) == "eager" for slot in SLOTS)


def test_unknown_slot_error_lists_valid_slots() -> None:
    with pytest.raises(OpsConfigError, match=r"unknown op slot 'group_norm'.*rms_norm.*causal_lm_loss"):
        OpsConfig({"group_norm": "eager"})


def test_unknown_kernel_error_lists_valid_kernels_for_the_slot() -> None:
    with pytest.raises(
        OpsConfigError, match=r"unknown kernel 'chunked' for op slot 'rms_norm' \(valid: eager, compiled, liger, npu\)"
    ):
        OpsConfig({"rms_norm": "chunked"})


def test_kernel_registry_per_slot() -> None:
    assert kernel_names("rms_norm") == ("eager", "compiled", "liger", "npu")
    assert kernel_names("glu_activation") == ("eager", "compiled", "liger", "npu")
    assert kernel_names("rope") == ("eager", "compiled", "liger", "npu")
    assert kernel_names("causal_lm_loss") == ("eager", "chunked", "global_batch", "liger")
    assert kernel_names("sequence_classification_loss") == ("eager",)
    assert kernel_names("moe_experts") == ("eager", "ep_alltoall", "grouped", "grouped_compiled")
    assert kernel_names("load_balancing_loss") == ("eager", "global_batch")
    assert kernel_names("dsa_indexer") == ("eager", "shared_keys", "sp_gather")
    assert kernel_names("lightning_indexer") == ("eager", "shared_keys")


def test_kernel_options_for_an_eager_slot_are_rejected() -> None:
    with pytest.raises(OpsConfigError, match="runs eager"):
        OpsConfig(kernel_options={"causal_lm_loss": {"chunk_size": 8}})


@pytest.mark.parametrize("option", ["chunk_sise", "vocab_size"])
def test_an_option_the_kernel_does_not_take_is_rejected_at_bind(option: str) -> None:
    ops = OpsConfig({"causal_lm_loss": "chunked"}, kernel_options={"causal_lm_loss": {option: 8}})
    with pytest.raises(OpsConfigError, match=rf"no option\(s\) \['{option}'\].*chunk_size"):
        bind_ops(ops)
    assert not causal_lm_loss_slot.use_non_eager_impl


def test_everywhere_selects_every_slot_that_has_the_kernel() -> None:
    assert dict(OpsConfig.everywhere("chunked").kernels) == {"causal_lm_loss": "chunked"}
    assert set(OpsConfig.everywhere("liger").kernels) == {
        "rms_norm",
        "glu_activation",
        "gated_mlp",
        "rope",
        "causal_lm_loss",
    }
    with pytest.raises(OpsConfigError, match="unknown kernel 'triton'"):
        OpsConfig.everywhere("triton")


def test_config_is_immutable_after_construction() -> None:
    kernels = {"causal_lm_loss": "chunked"}
    ops = OpsConfig(kernels)
    kernels["causal_lm_loss"] = "eager"
    assert ops.kernel_for("causal_lm_loss") == "chunked"
    with pytest.raises(TypeError):
        ops.kernels["rope"] = "liger"  # type: ignore[index]


def test_bind_ops_binds_the_named_kernels_and_unbinds_the_rest() -> None:
    rms_norm_slot.bind(eager.rms_norm, name="manual")
    bind_ops(OpsConfig({"causal_lm_loss": "chunked"}))
    assert current_ops() == {"causal_lm_loss": "chunked"}
    assert not rms_norm_slot.use_non_eager_impl


def test_unbind_ops_returns_every_slot_to_eager() -> None:
    bind_ops(OpsConfig({"causal_lm_loss": "chunked"}))
    unbind_ops()
    assert current_ops() == {}


def test_bound_ops_restores_the_previous_binding() -> None:
    rms_norm_slot.bind(eager.rms_norm, name="manual")
    with bound_ops(OpsConfig({"causal_lm_loss": "chunked"})):
        assert current_ops() == {"causal_lm_loss": "chunked"}
    assert current_ops() == {"rms_norm": "manual"}
    assert rms_norm_slot.bound is not None and rms_norm_slot.bound.fn is eager.rms_norm


def test_bound_ops_restores_after_an_exception() -> None:
    with pytest.raises(RuntimeError, match="boom"), bound_ops(OpsConfig({"causal_lm_loss": "chunked"})):
        raise RuntimeError("boom")
    assert current_ops() == {}


@pytest.mark.skipif(LIGER_RUNS_HERE, reason="liger can run on this machine, so binding it cannot fail")
def test_a_failed_bind_leaves_the_previous_binding_intact() -> None:
    bind_ops(OpsConfig({"causal_lm_loss": "chunked"}))
    with pytest.raises(KernelUnavailableError):
        bind_ops(OpsConfig.everywhere("liger"))
    assert current_ops() == {"causal_lm_loss": "chunked"}


def _parameters_in_source(module_file: Path, function: str) -> list[tuple[str, str]]:
    """Parameter (name, kind) of a function, read from source so GPU-only modules need not import."""
    tree = ast.parse(module_file.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    args = node.args
    params = [(a.arg, "POSITIONAL_OR_KEYWORD") for a in args.posonlyargs + args.args]
    if args.vararg:
        params.append((args.vararg.arg, "VAR_POSITIONAL"))
    params += [(a.arg, "KEYWORD_ONLY") for a in args.kwonlyargs]
    if args.kwarg:
        params.append((args.kwarg.arg, "VAR_KEYWORD"))
    return params


@pytest.mark.parametrize(
    ("family", "slot"), [(family.name, slot) for family in KERNEL_FAMILIES.values() for slot in sorted(family.slots)]
)
def test_every_kernel_accepts_its_slot_contract(family: str, slot: str) -> None:
    contract = [(name, p.kind.name) for name, p in inspect.signature(getattr(eager, slot)).parameters.items()]
    module_file = Path(importlib.util.find_spec(KERNEL_FAMILIES[family].module).origin)
    kernel = _parameters_in_source(module_file, slot)
    extras = [param for param in kernel if param not in contract]
    assert [param for param in kernel if param in contract] == contract
    # Anything beyond the contract is an option, which OpsConfig passes by keyword.
    assert all(kind == "KEYWORD_ONLY" for _, kind in extras), extras
