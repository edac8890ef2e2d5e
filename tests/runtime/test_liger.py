"""Liger kernels: refused at bind time where they cannot run; on a CUDA machine, compared with eager."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from transformers.loss.loss_utils import ForCausalLMLoss

from modelgraft.models.ops import (
    KERNEL_FAMILIES,
    SLOTS,
    KernelUnavailableError,
    OpsConfig,
    OpsConfigError,
    bind_ops,
    bound_ops,
    current_ops,
)
from modelgraft.models.ops.kernels import eager

LIGER_SLOTS = sorted(KERNEL_FAMILIES["liger"].slots)
WHY_LIGER_CANNOT_RUN = KERNEL_FAMILIES["liger"].unavailable_reason()

needs_liger = pytest.mark.skipif(
    WHY_LIGER_CANNOT_RUN is not None, reason=f"liger not exercised: {WHY_LIGER_CANNOT_RUN}"
)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("slot", LIGER_SLOTS)
def test_binding_liger_without_cuda_fails_at_bind_time(slot: str) -> None:
    with pytest.raises(KernelUnavailableError, match=rf"kernel 'liger' to slot '{slot}'.*CUDA") as caught:
        bind_ops(OpsConfig({slot: "liger"}))
    assert (caught.value.slot, caught.value.kernel) == (slot, "liger")
    assert not SLOTS[slot].use_non_eager_impl


def test_liger_has_no_sequence_classification_loss() -> None:
    with pytest.raises(OpsConfigError, match="valid: eager"):
        OpsConfig({"sequence_classification_loss": "liger"})


@pytest.fixture
def liger_bound() -> Iterator[None]:
    with bound_ops(OpsConfig.everywhere("liger")):
        assert set(current_ops()) == set(LIGER_SLOTS)
        yield


@pytest.mark.gpu
@needs_liger
@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_liger_rms_norm_matches_eager(liger_bound: None, offset: float, dtype: torch.dtype) -> None:
    x = torch.randn(4, 9, 48, device="cuda", dtype=dtype)
    weight = torch.randn(48, device="cuda", dtype=dtype)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    expected = eager.rms_norm(x, weight, 1e-6, offset=offset)
    actual = SLOTS["rms_norm"](x, weight, 1e-6, offset=offset)
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)


@pytest.mark.gpu
@needs_liger
@pytest.mark.parametrize("activation", ["silu", "gelu_pytorch_tanh"])
def test_liger_glu_activation_matches_eager(liger_bound: None, activation: str) -> None:
    gate, up = torch.randn(4, 9, 80, device="cuda"), torch.randn(4, 9, 80, device="cuda")
    torch.testing.assert_close(
        SLOTS["glu_activation"](gate, up, activation), eager.glu_activation(gate, up, activation), rtol=1e-5, atol=1e-5
    )


@pytest.mark.gpu
@needs_liger
@pytest.mark.parametrize("with_biases", [False, True])
def test_liger_gated_mlp_matches_eager(liger_bound: None, with_biases: bool) -> None:
    x = torch.randn(3, 7, 32, device="cuda")
    gate_w, up_w, down_w = (
        torch.randn(48, 32, device="cuda"),
        torch.randn(48, 32, device="cuda"),
        torch.randn(32, 48, device="cuda"),
    )
    biases = (
        {
            "gate_bias": torch.randn(48, device="cuda"),
            "up_bias": torch.randn(48, device="cuda"),
            "down_bias": torch.randn(32, device="cuda"),
        }
        if with_biases
        else {}
    )
    torch.testing.assert_close(
        SLOTS["gated_mlp"](x, gate_w, up_w, down_w, "silu", **biases),
        eager.gated_mlp(x, gate_w, up_w, down_w, "silu", **biases),
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.gpu
@needs_liger
def test_liger_rope_matches_eager(liger_bound: None) -> None:
    q, k = torch.randn(2, 6, 11, 16, device="cuda"), torch.randn(2, 2, 11, 16, device="cuda")
    cos, sin = torch.randn(2, 11, 16, device="cuda"), torch.randn(2, 11, 16, device="cuda")
    for actual, expected in zip(SLOTS["rope"](q, k, cos, sin), eager.rope(q, k, cos, sin)):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@needs_liger
@pytest.mark.parametrize("loss_kwargs", [{}, {"num_items_in_batch": 17}, {"final_logit_softcapping": 2.5}])
def test_liger_causal_lm_loss_matches_upstream(liger_bound: None, loss_kwargs: dict) -> None:
    hidden = torch.randn(3, 13, 16, device="cuda", requires_grad=True)
    weight = torch.randn(211, 16, device="cuda", requires_grad=True)
    labels = torch.randint(0, 211, (3, 13), device="cuda")
    labels[0, :4] = -100
    softcap = loss_kwargs.pop("final_logit_softcapping", None)
    logits = torch.nn.functional.linear(hidden, weight)
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    expected = ForCausalLMLoss(logits, labels, vocab_size=211, **loss_kwargs)
    loss, no_logits = SLOTS["causal_lm_loss"](
        hidden, weight, labels, vocab_size=211, final_logit_softcapping=softcap, **loss_kwargs
    )
    assert no_logits is None
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    for actual_grad, expected_grad in zip(
        torch.autograd.grad(loss, (hidden, weight)), torch.autograd.grad(expected, (hidden, weight))
    ):
        torch.testing.assert_close(actual_grad, expected_grad, rtol=1e-4, atol=1e-5)
