"""gpt_oss's experts behind the moe_experts slot: the eager kernel is upstream's GptOssExperts, the grouped kernel
matches it in the interleaved + bias + clamped layout.

The inputs are upstream's own module (``GptOssExperts`` with its limit 7.0 and alpha 1.702), given random
weights and biases scaled so that a good share of gate and up values lie beyond the clamp, and routing
from a softmax over the top-k logits as ``GptOssTopKRouter`` computes it. The slot gets exactly what the
generated sparse block passes (``layout="transposed"``, ``interleaved=True``, both biases, limit, alpha).

Tolerances, outputs and the gradients of the hidden states, routing weights, both projections and both
biases:

- eager kernel vs upstream, fp32: bitwise (the same operations in the same order);
- grouped vs upstream, fp32: ``KERNEL_TOLERANCE`` (rtol 1e-4, atol 1e-5);
- grouped vs upstream, bf16: ``|grouped - upstream| <= 2e-2 * max|upstream|`` per tensor (about 2.5 bf16
  ulps at the largest value): both round every product to bf16, and grouped applies the routing weight
  before the down projection instead of after it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from transformers import GptOssConfig
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

from modelgraft.models.ops.kernels import eager, grouped_experts
from modelgraft.models.testing import KERNEL_TOLERANCE

E, K, H, I, T = 7, 3, 40, 24, 53
BF16_SCALE = 2e-2


def _experts(dtype: torch.dtype) -> GptOssExperts:
    config = GptOssConfig(hidden_size=H, intermediate_size=I, num_local_experts=E, num_experts_per_tok=K)
    config._experts_implementation = "eager"
    module = GptOssExperts(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param, scale in (
            (module.gate_up_proj, 1.0),
            (module.gate_up_proj_bias, 3.0),
            (module.down_proj, 0.3),
            (module.down_proj_bias, 1.0),
        ):
            param.copy_(torch.randn(param.shape, generator=generator) * scale)
    return module.to(dtype)


def _routing(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    hidden = torch.randn(T, H, generator=generator)
    logits = torch.randn(T, E, generator=generator)
    top, index = torch.topk(logits, K, dim=-1)
    return hidden.to(dtype), index, top.softmax(dim=-1).to(dtype)


def _slot_call(kernel: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The call the generated GptOssMLP.forward makes when the moe_experts slot is bound."""

    def call(module: GptOssExperts, hidden: torch.Tensor, index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return kernel(
            hidden,
            index,
            weights,
            module.gate_up_proj,
            module.down_proj,
            "silu",
            layout="transposed",
            interleaved=True,
            gate_up_bias=module.gate_up_proj_bias,
            down_bias=module.down_proj_bias,
            limit=module.limit,
            alpha=module.alpha,
        )

    return call


def _upstream_call(module: GptOssExperts, hidden: torch.Tensor, index: torch.Tensor, weights: torch.Tensor):
    return module(hidden, index, weights)


def _step(call: Callable[..., torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Output and every gradient, in fp32, from a fixed non-uniform output gradient."""
    module = _experts(dtype)
    hidden, index, weights = _routing(dtype)
    hidden.requires_grad_(True)
    weights.requires_grad_(True)
    out = call(module, hidden, index, weights)
    assert out.dtype == dtype
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    out.backward(grad)
    results = {"output": out.detach(), "hidden_states": hidden.grad, "routing_weights": weights.grad}
    results.update({name: param.grad for name, param in module.named_parameters()})
    return {name: value.float() for name, value in results.items()}


def test_the_clamp_is_reached_by_the_test_inputs() -> None:
    module = _experts(torch.float32)
    hidden, _, _ = _routing(torch.float32)
    pre = hidden @ module.gate_up_proj[0] + module.gate_up_proj_bias[0]
    assert (pre[..., ::2] > module.limit).any() and (pre[..., 1::2].abs() > module.limit).any()


def test_eager_kernel_is_upstream_bit_for_bit() -> None:
    expected, actual = _step(_upstream_call, torch.float32), _step(_slot_call(eager.moe_experts), torch.float32)
    for name, want in expected.items():
        assert torch.equal(actual[name], want), f"{name} differs from upstream GptOssExperts"


def test_grouped_kernel_matches_upstream_in_fp32() -> None:
    expected = _step(_upstream_call, torch.float32)
    actual = _step(_slot_call(grouped_experts.moe_experts), torch.float32)
    for name, want in expected.items():
        torch.testing.assert_close(
            actual[name],
            want,
            rtol=KERNEL_TOLERANCE.rtol,
            atol=KERNEL_TOLERANCE.atol,
            msg=lambda m, n=name: f"{n}: {m}",
        )


@pytest.mark.parametrize("kernel", ["eager", "grouped"])
def test_kernel_matches_upstream_in_bf16(kernel: str) -> None:
    module = {"eager": eager, "grouped": grouped_experts}[kernel]
    expected = _step(_upstream_call, torch.bfloat16)
    actual = _step(_slot_call(module.moe_experts), torch.bfloat16)
    for name, want in expected.items():
        error = float((actual[name] - want).abs().max())
        assert error <= BF16_SCALE * float(want.abs().max()), f"{name}: max error {error:.3g}"
