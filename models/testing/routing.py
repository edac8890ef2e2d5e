"""Checks of a MoE model's router slot: its reference kernel is upstream bit for bit, a wrong kernel shows.

The suite's one-slot test binds each reference kernel and compares with upstream within the eager
tolerance; a router picks experts with a top-k, so its kernel must be exact, and these helpers say so
bit for bit: a training step with the router's reference kernel bound equals the step with the slot
unbound (upstream's code), loss, logits, aux loss and every gradient, and each router returns the same
logits, weights and experts. The mutant check is the other side: a kernel that gets one routing setting
wrong must change what the model computes (its logits or its aux loss), so the model's tests would catch it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from transformers import PreTrainedModel

from modelgraft.models.ops import SLOTS, OpsConfig, bound_ops
from modelgraft.models.ops.kernels import eager
from modelgraft.models.testing.parity import StepResult, Tolerance, run_step

__all__ = [
    "assert_same_router_outputs",
    "assert_same_step",
    "counted_reference",
    "kernel_bound",
    "router_outputs",
    "routes_differently",
    "step_with_kernel",
]


@contextmanager
def kernel_bound(slot: str, kernel: Callable[..., Any] | None) -> Iterator[None]:
    """``kernel`` alone bound to ``slot`` for a ``with`` block (None: every slot eager); the binding is restored."""
    with bound_ops(OpsConfig()):
        if kernel is not None:
            SLOTS[slot].bind(kernel, name=f"test.{slot}")
        yield


def step_with_kernel(
    model: PreTrainedModel, batch: Mapping[str, Any], slot: str, kernel: Callable[..., Any] | None
) -> StepResult:
    """One training step of ``model`` with ``kernel`` alone bound to ``slot`` (None: every slot eager)."""
    with kernel_bound(slot, kernel):
        return run_step(model, batch)


def assert_same_step(expected: StepResult, actual: StepResult) -> None:
    """Loss, logits, aux loss and every gradient bit for bit equal (``torch.equal``), naming the first that is not."""
    for what, want, got in (
        ("loss", expected.loss, actual.loss),
        ("logits", expected.logits, actual.logits),
        ("aux loss", expected.aux_loss, actual.aux_loss),
    ):
        assert (want is None) == (got is None), what
        assert want is None or torch.equal(got, want), f"{what} differ"
    assert set(actual.grads) == set(expected.grads)
    for name, want in expected.grads.items():
        got = actual.grads[name]
        assert (want is None) == (got is None), name
        assert want is None or torch.equal(got, want), f"gradient of {name} differs"


def router_outputs(model: PreTrainedModel, batch: Mapping[str, Any], router: str) -> list[tuple[torch.Tensor, ...]]:
    """What each module named ``*.<router>`` returned in one forward, in layer order."""
    outputs: list[tuple[torch.Tensor, ...]] = []

    def record(_module: torch.nn.Module, _args: Any, out: tuple[torch.Tensor, ...]) -> None:
        outputs.append(tuple(t.detach() for t in out))

    handles = [module.register_forward_hook(record) for name, module in model.named_modules() if name.endswith(router)]
    try:
        with torch.no_grad():
            model(**batch)
    finally:
        for handle in handles:
            handle.remove()
    return outputs


def assert_same_router_outputs(
    expected: list[tuple[torch.Tensor, ...]], actual: list[tuple[torch.Tensor, ...]]
) -> None:
    """Every router's logits, weights and expert indices bit for bit equal, naming the first layer that is not."""
    assert len(actual) == len(expected), f"{len(actual)} routers ran, upstream ran {len(expected)}"
    for layer, (want, got) in enumerate(zip(expected, actual, strict=True)):
        for what, w, g in zip(("router logits", "weights", "expert indices"), want, got, strict=True):
            assert torch.equal(g, w), f"{what} of router {layer} (in layer order) differ from upstream"


def counted_reference(slot: str, calls: list[str]) -> Callable[..., Any]:
    """The slot's reference kernel (``modelgraft.models.ops.kernels.eager``), noting each call in ``calls``, so a test
    knows the generated code's guard reached it."""
    reference = getattr(eager, slot)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        calls.append(slot)
        return reference(*args, **kwargs)

    return kernel


def routes_differently(expected: StepResult, actual: StepResult, tolerance: Tolerance) -> bool:
    """The logits, or the aux loss where there is one, differ beyond ``tolerance``: a wrong router shows."""

    def differs(want: torch.Tensor | None, got: torch.Tensor | None) -> bool:
        if want is None or got is None:
            return want is not got
        return not torch.allclose(got, want, rtol=tolerance.rtol, atol=tolerance.atol)

    return differs(expected.logits, actual.logits) or differs(expected.aux_loss, actual.aux_loss)


def _group_limited_router_mutant(**changes: Any) -> Callable[..., Any]:
    def kernel(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, **settings: Any) -> Any:
        if changes.get("no_bias"):
            bias = torch.zeros_like(bias)
        if changes.get("no_group_limit"):
            settings["topk_group"] = settings["n_group"]
        settings.update({k: v for k, v in changes.items() if k not in ("no_bias", "no_group_limit")})
        return eager.group_limited_router(hidden, weight, bias, **settings)

    return kernel


def _gated_mlp_mutant(swap: bool = False, activation: str | None = None) -> Callable[..., Any]:
    def kernel(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor, act: str, **biases: Any):
        if swap:
            gate, up = up, gate
        return eager.gated_mlp(x, gate, up, down, activation or act, **biases)

    return kernel


#: Kernels that get one argument of the group-limited router or the whole gated MLP wrong, by the slip
#: (DeepSeek-V3, GLM-MoE-DSA): a model's tiny config must expose each. The scale 2.5 is DeepSeek's default.
GROUP_LIMITED_MUTANTS: dict[str, tuple[str, Callable[..., Any]]] = {
    "router without the correction bias": ("group_limited_router", _group_limited_router_mutant(no_bias=True)),
    "router without the group limit": ("group_limited_router", _group_limited_router_mutant(no_group_limit=True)),
    "router that skips the renormalisation": (
        "group_limited_router",
        _group_limited_router_mutant(norm_topk_prob=False),
    ),
    "router with the default scale": (
        "group_limited_router",
        _group_limited_router_mutant(routed_scaling_factor=2.5),
    ),
    "router choosing one expert fewer": ("group_limited_router", _group_limited_router_mutant(top_k=2)),
    "MLP with gate and up swapped": ("gated_mlp", _gated_mlp_mutant(swap=True)),
    "MLP with another activation": ("gated_mlp", _gated_mlp_mutant(activation="gelu")),
}
