"""The gated_mlp reference kernel is upstream's gated MLP, and each of its arguments matters.

DeepSeek-V3's ``DeepseekV3MLP`` (its dense layers' MLP and its shared experts) is the reference: the
kernel, given the module's weights, biases and activation name, must return its output bit for bit and
the same gradients. Biases are taken per projection, so an MLP with biased linears is recomputed too.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MLP

from modelgraft.models.ops.kernels import eager


def _mlp(hidden_act: str = "silu") -> DeepseekV3MLP:
    torch.manual_seed(0)
    return DeepseekV3MLP(DeepseekV3Config(hidden_size=24, intermediate_size=40, hidden_act=hidden_act))


def _kernel(mlp: nn.Module, x: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    return eager.gated_mlp(
        x,
        mlp.gate_proj.weight,
        mlp.up_proj.weight,
        mlp.down_proj.weight,
        activation,
        gate_bias=mlp.gate_proj.bias,
        up_bias=mlp.up_proj.bias,
        down_bias=mlp.down_proj.bias,
    )


def _x(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(2, 5, 24, generator=torch.Generator().manual_seed(1)).to(dtype)


@pytest.mark.parametrize("hidden_act", ["silu", "gelu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_kernel_returns_upstreams_mlp_output(dtype: torch.dtype, hidden_act: str) -> None:
    mlp = _mlp(hidden_act).to(dtype)
    x = _x(dtype)
    assert torch.equal(_kernel(mlp, x, hidden_act), mlp(x))


def test_kernel_gradients_equal_upstreams() -> None:
    mlp = _mlp()
    x = _x().requires_grad_(True)
    mlp(x).pow(2).sum().backward()
    expected = [x.grad.clone(), *(p.grad.clone() for p in mlp.parameters())]
    x.grad = None
    mlp.zero_grad(set_to_none=True)
    _kernel(mlp, x).pow(2).sum().backward()
    actual = [x.grad, *(p.grad for p in mlp.parameters())]
    assert all(torch.equal(a, e) for a, e in zip(actual, expected, strict=True))


def test_each_projections_bias_is_added() -> None:
    mlp = _mlp()
    for name in ("gate_proj", "up_proj", "down_proj"):
        old = getattr(mlp, name)
        biased = nn.Linear(old.in_features, old.out_features, bias=True)
        with torch.no_grad():
            biased.weight.copy_(old.weight)
            biased.bias.normal_()
        setattr(mlp, name, biased)
    x = _x()
    assert torch.equal(_kernel(mlp, x), mlp(x))
    without = eager.gated_mlp(x, mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight, "silu")
    assert not torch.allclose(without, mlp(x))


def test_the_output_depends_on_the_activation_and_the_order_of_gate_and_up() -> None:
    mlp = _mlp()
    x = _x()
    base = _kernel(mlp, x)
    assert not torch.allclose(_kernel(mlp, x, "gelu"), base)
    swapped = eager.gated_mlp(x, mlp.up_proj.weight, mlp.gate_proj.weight, mlp.down_proj.weight, "silu")
    assert not torch.allclose(swapped, base)


def test_a_gated_mlp_with_the_eager_glu_is_the_eager_gated_mlp() -> None:
    """The Liger and NPU families build their gated_mlp this way; with eager's GLU it must be eager's MLP."""
    from modelgraft.models.ops.kernels import eager
    from modelgraft.models.ops.kernels.gated_mlp import gated_mlp_with

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 8, generator=generator)
    gate, up, down = (
        torch.randn(12, 8, generator=generator),
        torch.randn(12, 8, generator=generator),
        torch.randn(8, 12, generator=generator),
    )
    bias = {"up_bias": torch.randn(12, generator=generator), "down_bias": torch.randn(8, generator=generator)}
    expected = eager.gated_mlp(x, gate, up, down, "silu", **bias)
    assert torch.equal(gated_mlp_with(eager.glu_activation, x, gate, up, down, "silu", **bias), expected)


def test_a_gated_mlp_with_a_glu_kernel_calls_that_kernel() -> None:
    from modelgraft.models.ops.kernels.gated_mlp import gated_mlp_with

    calls: list[str] = []

    def doubling_glu(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
        calls.append(activation)
        return 2 * gate * up

    x, gate, up, down = torch.ones(2, 4), torch.eye(4), torch.eye(4), torch.eye(4)
    assert torch.equal(gated_mlp_with(doubling_glu, x, gate, up, down, "gelu"), 2 * x)
    assert calls == ["gelu"]
