"""Every expert layout of the ``moe_experts`` contract: the eager reference is upstream's code, the grouped kernels
(``grouped``, and ``grouped_compiled``'s code run eagerly) match it.

Layouts (keyword-only, defaults = the original positional contract): ``layout`` "fused" ``[E, 2I, H]`` /
``[E, H, I]`` or "transposed" ``[E, H, 2I]`` / ``[E, I, H]``; ``interleaved`` gate/up columns (gpt_oss);
``gate_up_bias`` / ``down_bias``; the gated unit plain, clamped (``limit``, DeepSeek-V4), gpt_oss's
(``limit`` + ``alpha``) or clamped after the activation (``limit`` + ``activation_first``, Step-3.7).

Tolerances of grouped vs eager, outputs and the gradients of every input (hidden states, routing
weights, both projections, both biases):

- fp32: ``KERNEL_TOLERANCE`` (rtol 1e-4, atol 1e-5); measured worst 4.5e-7 relative to the largest value.
- bf16: ``|grouped - eager| <= 2e-2 * max|eager|`` per tensor, about 2.5 bf16 ulps at the largest
  value; measured worst 9.6e-3. Both sides round every product to bf16, and grouped applies the
  routing weight before the down projection instead of after it.

``grouped_compiled`` runs here under ``torch.compiler.set_stance("force_eager")``: its backward's gated-unit
block (``compiled_experts.unit_gradients``) as plain torch, on every layout, without a C++ compiler and without
inductor's compile time per layout; the same tolerances hold. Compiled by inductor, it is checked on the zoo's
three units in tests/compile/test_kernels.py.
"""

from __future__ import annotations

import contextlib
import itertools

import pytest
import torch

from modelgraft.models.ops import OpsConfig, bound_ops, moe_experts_slot
from modelgraft.models.ops.kernels import compiled_experts, eager, grouped_experts
from modelgraft.models.ops.kernels.expert_units import GatedUnit, gated_value, has_unit
from modelgraft.models.testing import KERNEL_TOLERANCE

E, K, H, I, T = 7, 3, 20, 12, 29
BF16_SCALE = 2e-2

GATES = {"plain": (None, None), "clamped": (1.0, None), "gpt_oss": (1.0, 1.702)}
LAYOUTS = list(itertools.product(("fused", "transposed"), (False, True), (False, True), GATES))


#: The grouped kernels: each runs under its context (grouped_compiled's compiled block as plain torch).
KERNELS = {
    "grouped": (grouped_experts.moe_experts, contextlib.nullcontext),
    "grouped_compiled": (compiled_experts.moe_experts, lambda: torch.compiler.set_stance("force_eager")),
}


def _layout_id(case: tuple) -> str:
    layout, interleaved, bias, gate = case
    return f"{layout}-{'interleaved' if interleaved else 'gate_first'}-{'bias' if bias else 'nobias'}-{gate}"


def _inputs(
    layout: str, bias: bool, *, seed: int = 0, hidden: int = H, intermediate: int = I, tokens: int = T
) -> dict[str, torch.Tensor | None]:
    generator = torch.Generator().manual_seed(seed)
    probs = torch.randn(tokens, E, generator=generator).softmax(-1)
    weights, index = torch.topk(probs, K, dim=-1)
    gate_up = torch.randn(E, 2 * intermediate, hidden, generator=generator) * 0.3
    down = torch.randn(E, hidden, intermediate, generator=generator) * 0.3
    if layout == "transposed":
        gate_up, down = gate_up.transpose(1, 2).contiguous(), down.transpose(1, 2).contiguous()
    return {
        "hidden_states": torch.randn(tokens, hidden, generator=generator),
        "top_k_index": index,
        "top_k_weights": weights,
        "gate_up_proj": gate_up,
        "down_proj": down,
        "gate_up_bias": torch.randn(E, 2 * intermediate, generator=generator) if bias else None,
        "down_bias": torch.randn(E, hidden, generator=generator) if bias else None,
    }


def _run(kernel, inputs, dtype, activation="silu", **options):
    """Output and the gradient of every floating input, in fp32, from a fixed non-uniform output gradient."""
    leaves = {
        name: value.to(dtype).requires_grad_(True)
        for name, value in inputs.items()
        if value is not None and value.is_floating_point()
    }
    out = kernel(
        leaves["hidden_states"],
        inputs["top_k_index"],
        leaves["top_k_weights"],
        leaves["gate_up_proj"],
        leaves["down_proj"],
        activation,
        gate_up_bias=leaves.get("gate_up_bias"),
        down_bias=leaves.get("down_bias"),
        **options,
    )
    assert out.dtype == dtype
    (out.float() * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return {"output": out.detach().float(), **{name: leaf.grad.float() for name, leaf in leaves.items()}}


def _assert_matches(actual: dict, expected: dict, dtype: torch.dtype) -> None:
    assert actual.keys() == expected.keys()
    for name, want in expected.items():
        got = actual[name]
        if dtype == torch.float32:
            assert torch.allclose(got, want, rtol=KERNEL_TOLERANCE.rtol, atol=KERNEL_TOLERANCE.atol), name
        else:
            bound = BF16_SCALE * want.abs().max()
            assert (got - want).abs().max() <= bound, f"{name}: {(got - want).abs().max():.3g} > {bound:.3g}"


def _options(case: tuple) -> dict:
    layout, interleaved, _, gate = case
    limit, alpha = GATES[gate]
    return {"layout": layout, "interleaved": interleaved, "limit": limit, "alpha": alpha}


def _run_each(inputs: dict, dtype: torch.dtype, activation: str = "silu", **options) -> dict[str, dict]:
    """Every grouped kernel's :func:`_run`, by kernel name."""
    results = {}
    for name, (kernel, context) in KERNELS.items():
        with context():
            results[name] = _run(kernel, inputs, dtype, activation, **options)
    return results


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", LAYOUTS, ids=_layout_id)
def test_grouped_kernels_match_eager_for_every_layout(case: tuple, dtype: torch.dtype) -> None:
    inputs = _inputs(case[0], case[2])
    expected = _run(eager.moe_experts, inputs, dtype, **_options(case))
    for actual in _run_each(inputs, dtype, **_options(case)).values():
        _assert_matches(actual, expected, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "case",
    [("fused", False, False, "plain"), ("transposed", True, True, "gpt_oss"), ("fused", False, True, "clamped")],
    ids=_layout_id,
)
def test_grouped_kernels_match_eager_when_experts_receive_no_tokens(case: tuple, dtype: torch.dtype) -> None:
    inputs = _inputs(case[0], case[2])
    # Every token picks among experts 1, 3 and 4 only: experts 0, 2, 5, 6 get no rows at all.
    used = torch.tensor([1, 3, 4])
    inputs["top_k_index"] = torch.stack(
        [used[torch.randperm(3, generator=torch.Generator().manual_seed(t))] for t in range(T)]
    )
    expected = _run(eager.moe_experts, inputs, dtype, **_options(case))
    for kernel, actual in _run_each(inputs, dtype, **_options(case)).items():
        _assert_matches(actual, expected, dtype)
        for name in ("gate_up_proj", "down_proj", *(("gate_up_bias", "down_bias") if case[2] else ())):
            assert not actual[name][[0, 2, 5, 6]].any(), f"{kernel}, {name}: an expert without tokens got a gradient"


@pytest.mark.parametrize("hidden,intermediate", [(24, 12), (12, 12)], ids=["H==2I", "H==I"])
def test_the_layout_is_the_keyword_never_the_shapes(hidden: int, intermediate: int) -> None:
    fused = _inputs("fused", False, hidden=hidden, intermediate=intermediate)
    transposed = _inputs("transposed", False, hidden=hidden, intermediate=intermediate)
    # Same experts, both layouts: with the right keyword the results agree ...
    want = _run(eager.moe_experts, fused, torch.float32)
    for kernel in (eager.moe_experts, grouped_experts.moe_experts):
        got = _run(kernel, transposed, torch.float32, layout="transposed")
        assert torch.allclose(got["output"], want["output"], rtol=1e-5, atol=1e-6)
        # ... and the wrong keyword is an error, even where gate_up_proj alone cannot tell (H == 2I: square).
        with pytest.raises(ValueError, match="is the layout keyword right"):
            _run(kernel, transposed, torch.float32)
        with pytest.raises(ValueError, match="is the layout keyword right"):
            _run(kernel, fused, torch.float32, layout="transposed")


@pytest.mark.parametrize(
    "options,message",
    [
        ({"layout": "columns"}, "layout must be one of"),
        ({"alpha": 1.702}, "alpha .* needs limit"),
        ({"gate_up_bias": torch.zeros(E, I)}, "gate_up_bias must be"),
        ({"down_bias": torch.zeros(E, I)}, "down_bias must be"),
        ({"limit": 1.0, "alpha": 1.702, "activation_first": True}, "activation_first clamps ACT"),
    ],
    ids=["unknown-layout", "alpha-without-limit", "gate-up-bias-shape", "down-bias-shape", "alpha-activation-first"],
)
def test_invalid_options_are_errors(options: dict, message: str) -> None:
    inputs = {k: v for k, v in _inputs("fused", False).items() if not k.endswith("bias")}
    for kernel in (eager.moe_experts, grouped_experts.moe_experts, compiled_experts.moe_experts):
        with pytest.raises(ValueError, match=message):
            kernel(*inputs.values(), "silu", **options)


def test_grouped_kernels_compute_only_the_gradients_asked_for() -> None:
    inputs = {k: v for k, v in _inputs("transposed", True).items() if v is not None}
    options = {"layout": "transposed", "interleaved": True, "limit": 1.0, "alpha": 1.702}
    grads = {}
    kernels = {"eager": (eager.moe_experts, contextlib.nullcontext), **KERNELS}
    for name, (kernel, context) in kernels.items():
        leaves = {k: v.clone().requires_grad_(k in ("gate_up_proj", "down_bias")) for k, v in inputs.items()}
        args = [leaves[k] for k in ("hidden_states", "top_k_index", "top_k_weights", "gate_up_proj", "down_proj")]
        with context():
            kernel(
                *args, "silu", gate_up_bias=leaves["gate_up_bias"], down_bias=leaves["down_bias"], **options
            ).sum().backward()
        assert all(leaf.grad is None for k, leaf in leaves.items() if k not in ("gate_up_proj", "down_bias"))
        grads[name] = (leaves["gate_up_proj"].grad, leaves["down_bias"].grad)
    tol = {"rtol": KERNEL_TOLERANCE.rtol, "atol": KERNEL_TOLERANCE.atol}
    for name in KERNELS:
        for want, got in zip(grads["eager"], grads[name], strict=True):
            assert torch.allclose(got, want, **tol), name


def test_grouped_runs_without_autograd() -> None:
    inputs = _inputs("fused", True)
    with torch.no_grad():
        want = eager.moe_experts(*list(inputs.values())[:5], "silu", gate_up_bias=inputs["gate_up_bias"])
        got = grouped_experts.moe_experts(*list(inputs.values())[:5], "silu", gate_up_bias=inputs["gate_up_bias"])
    assert torch.allclose(got, want, rtol=KERNEL_TOLERANCE.rtol, atol=KERNEL_TOLERANCE.atol)


def test_the_slot_passes_the_layout_keywords_through() -> None:
    inputs = _inputs("transposed", True)
    options = {"layout": "transposed", "interleaved": True, "limit": 7.0, "alpha": 1.702}
    want = eager.moe_experts(*list(inputs.values())[:5], "silu", gate_up_bias=inputs["gate_up_bias"], **options)
    with bound_ops(OpsConfig({"moe_experts": "grouped"})):
        got = moe_experts_slot(*list(inputs.values())[:5], "silu", gate_up_bias=inputs["gate_up_bias"], **options)
    assert torch.allclose(got, want, rtol=KERNEL_TOLERANCE.rtol, atol=KERNEL_TOLERANCE.atol)


@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize(
    "case",
    [("fused", False, False, "plain"), ("transposed", True, True, "plain"), ("fused", False, True, "clamped")],
    ids=_layout_id,
)
def test_grouped_kernels_match_eager_for_activations_without_a_written_out_unit(case: tuple, activation: str) -> None:
    # These take the kernels' other backward: autograd on a per-expert recomputation of the unit (grouped_compiled
    # compiles no block for them).
    assert not has_unit(activation, alpha=None)
    assert compiled_experts.compiled_unit(torch.float32, 2 * I, activation, case[1], None, None) is None
    inputs = _inputs(case[0], case[2])
    expected = _run(eager.moe_experts, inputs, torch.float32, activation, **_options(case))
    for actual in _run_each(inputs, torch.float32, activation, **_options(case)).values():
        _assert_matches(actual, expected, torch.float32)


@pytest.mark.parametrize("gate", ["plain", "clamped", "gpt_oss"])
def test_the_written_out_units_are_upstreams_values_and_autograds_derivatives(gate: str) -> None:
    limit, alpha = GATES[gate]
    generator = torch.Generator().manual_seed(0)
    gate_in, up_in = (torch.randn(9, 16, generator=generator) * 2 for _ in range(2))
    if limit is not None:  # on the bounds (the gradient passes), just past them (it does not), and NaN
        gate_in[0, :4] = torch.tensor([limit, -limit, torch.nextafter(torch.tensor(limit), torch.tensor(99.0)), 0.5])
        up_in[0, :4] = torch.tensor([-limit, limit, 0.5, torch.nextafter(torch.tensor(-limit), torch.tensor(-99.0))])
        gate_in[1, 0], up_in[1, 1] = float("nan"), float("nan")
    want_value = eager.experts_glu(gate_in, up_in, "silu", limit=limit, alpha=alpha)
    # Bitwise: the forward pass's in-place version, and the backward pass's recomputation.
    bitwise = {"rtol": 0, "atol": 0, "equal_nan": True}
    torch.testing.assert_close(gated_value(gate_in, up_in, limit=limit, alpha=alpha), want_value, **bitwise)
    unit = GatedUnit(gate_in, up_in, limit=limit, alpha=alpha)
    torch.testing.assert_close(unit.value, want_value, **bitwise)

    leaves = [gate_in.clone().requires_grad_(True), up_in.clone().requires_grad_(True)]
    grad = torch.randn(want_value.shape, generator=generator)
    eager.experts_glu(*leaves, "silu", limit=limit, alpha=alpha).backward(grad)
    got_gate, got_up = torch.empty_like(gate_in), torch.empty_like(up_in)
    unit.backward(grad.clone(), got_gate, got_up)
    for got, leaf in zip((got_gate, got_up), leaves, strict=True):
        torch.testing.assert_close(got, leaf.grad, rtol=1e-6, atol=1e-7, equal_nan=True)


def test_the_activation_first_unit_clamps_the_activated_gate() -> None:
    """Step-3.7's unit: ACT(gate).clamp(max=l) * up.clamp(-l, l), which differs from clamping the gate first."""
    generator = torch.Generator().manual_seed(3)
    gate, up = (torch.randn(9, 16, generator=generator) * 3 for _ in range(2))
    got = eager.experts_glu(gate, up, "silu", limit=1.0, alpha=None, activation_first=True)
    assert torch.equal(got, torch.nn.functional.silu(gate).clamp(max=1.0) * up.clamp(min=-1.0, max=1.0))
    assert not torch.equal(got, eager.experts_glu(gate, up, "silu", limit=1.0, alpha=None))


def test_the_activation_first_unit_without_a_limit_is_the_plain_unit() -> None:
    """A layer whose limit is None (Step-3.7's zero or missing per-layer limit) clamps nothing."""
    generator = torch.Generator().manual_seed(4)
    gate, up = (torch.randn(9, 16, generator=generator) * 3 for _ in range(2))
    got = eager.experts_glu(gate, up, "silu", limit=None, alpha=None, activation_first=True)
    assert torch.equal(got, eager.experts_glu(gate, up, "silu", limit=None, alpha=None))


def test_the_activation_first_unit_has_no_written_out_derivative() -> None:
    assert not has_unit("silu", alpha=None, activation_first=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "case", [("fused", False, False), ("transposed", True, True)], ids=["fused", "transposed-bias"]
)
def test_grouped_kernels_match_eager_with_the_activation_first_unit(case: tuple, dtype: torch.dtype) -> None:
    layout, interleaved, bias = case
    inputs = _inputs(layout, bias)
    options = {"layout": layout, "interleaved": interleaved, "limit": 0.2, "activation_first": True}
    expected = _run(eager.moe_experts, inputs, dtype, **options)
    for actual in _run_each(inputs, dtype, **options).values():
        _assert_matches(actual, expected, dtype)
