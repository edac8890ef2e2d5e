"""Parity of a generated model against upstream transformers: same weights, same batch, compared outputs.

The contract (design.md section 5): with every slot eager, logits are bitwise equal and the loss and
every parameter's gradient match within ``EAGER_TOLERANCE``; with CPU kernels bound, the loss and the
gradients match within ``KERNEL_TOLERANCE`` (logits too, where the kernel returns them).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from transformers import PreTrainedConfig, PreTrainedModel

from models.loader import get_model_class
from models.ops import OpsConfig, bound_ops
from models.testing.batches import causal_lm_batch
from models.testing.seed import seed_everything

__all__ = [
    "EAGER_TOLERANCE",
    "KERNEL_TOLERANCE",
    "ModelPair",
    "StepResult",
    "Tolerance",
    "assert_step_parity",
    "build_pair",
    "check_parity",
    "run_step",
]

LogitsCheck = Literal["equal", "close", "skip"]


@dataclass(frozen=True)
class Tolerance:
    """``torch.allclose`` bounds."""

    rtol: float
    atol: float


#: Same upstream code on both sides, so only reassociation by a patched body may differ.
EAGER_TOLERANCE = Tolerance(rtol=1e-5, atol=1e-6)
#: fp32 kernels that reorder reductions (chunked loss sums chunk by chunk).
KERNEL_TOLERANCE = Tolerance(rtol=1e-4, atol=1e-5)


@dataclass(frozen=True)
class StepResult:
    """What one forward + backward produced; ``grads`` maps every parameter name to its grad (or None)."""

    loss: torch.Tensor
    logits: torch.Tensor | None
    grads: Mapping[str, torch.Tensor | None]


@dataclass(frozen=True)
class ModelPair:
    upstream: PreTrainedModel
    generated: PreTrainedModel


def build_pair(
    config: PreTrainedConfig,
    upstream_cls: type[PreTrainedModel],
    generated_cls: type[PreTrainedModel],
    *,
    seed: int = 0,
) -> ModelPair:
    """Both classes from copies of ``config``, fp32, train mode, the generated one loaded with upstream's weights."""
    seed_everything(seed)
    upstream = upstream_cls(copy.deepcopy(config)).float().train()
    generated = generated_cls(copy.deepcopy(config)).float().train()
    generated.load_state_dict(upstream.state_dict(), strict=True)
    return ModelPair(upstream=upstream, generated=generated)


def run_step(model: PreTrainedModel, batch: Mapping[str, torch.Tensor], *, seed: int = 0) -> StepResult:
    """One training forward + backward from zeroed grads, reseeded so both sides draw the same randomness."""
    model.zero_grad(set_to_none=True)
    seed_everything(seed)
    output = model(**batch, use_cache=False)
    if output.loss is None:
        raise AssertionError(f"{type(model).__name__} returned no loss; the batch needs labels")
    output.loss.backward()
    return StepResult(
        loss=output.loss.detach(),
        logits=None if output.logits is None else output.logits.detach(),
        grads={
            name: None if param.grad is None else param.grad.detach().clone()
            for name, param in model.named_parameters()
        },
    )


def _assert_close(what: str, expected: torch.Tensor, actual: torch.Tensor, tolerance: Tolerance) -> None:
    if expected.shape != actual.shape:
        raise AssertionError(f"{what}: shape {tuple(actual.shape)} != upstream {tuple(expected.shape)}")
    if not torch.allclose(actual, expected, rtol=tolerance.rtol, atol=tolerance.atol):
        diff = (actual - expected).abs().max().item()
        raise AssertionError(f"{what}: max |diff| {diff:.3e} exceeds rtol={tolerance.rtol}, atol={tolerance.atol}")


def assert_step_parity(
    upstream: StepResult,
    candidate: StepResult,
    *,
    tolerance: Tolerance = EAGER_TOLERANCE,
    logits: LogitsCheck = "equal",
) -> None:
    """Raise AssertionError naming the first output or parameter gradient where ``candidate`` diverges."""
    if logits != "skip":
        if upstream.logits is None or candidate.logits is None:
            raise AssertionError(f"logits check {logits!r} needs logits from both sides")
        if logits == "equal" and not torch.equal(candidate.logits, upstream.logits):
            diff = (candidate.logits - upstream.logits).abs().max().item()
            raise AssertionError(f"logits differ from upstream (max |diff| {diff:.3e}); they must be equal")
        if logits == "close":
            _assert_close("logits", upstream.logits, candidate.logits, tolerance)
    _assert_close("loss", upstream.loss, candidate.loss, tolerance)

    if set(candidate.grads) != set(upstream.grads):
        only_up = sorted(set(upstream.grads) - set(candidate.grads))
        only_cand = sorted(set(candidate.grads) - set(upstream.grads))
        raise AssertionError(f"parameter names differ: only upstream {only_up}, only generated {only_cand}")
    for name, expected in upstream.grads.items():
        actual = candidate.grads[name]
        if (expected is None) != (actual is None):
            raise AssertionError(
                f"grad of {name}: upstream {'none' if expected is None else 'present'}, "
                f"generated {'none' if actual is None else 'present'}"
            )
        if expected is not None and actual is not None:
            _assert_close(f"grad of {name}", expected, actual, tolerance)


def check_parity(
    config: PreTrainedConfig,
    architecture: str,
    *,
    backend: str = "gpu",
    model_type: str | None = None,
    ops: OpsConfig | None = None,
    batch: Mapping[str, torch.Tensor] | None = None,
    tolerance: Tolerance | None = None,
    seed: int = 0,
) -> tuple[StepResult, StepResult]:
    """Upstream ``transformers.<architecture>`` vs the registered generated class, one training step each.

    Without ``ops`` (or with an all-eager one) logits must be equal and the rest within
    ``EAGER_TOLERANCE``; with kernels bound, everything within ``KERNEL_TOLERANCE`` and logits compared
    only if the kernel returned them. ``batch`` defaults to ``causal_lm_batch(config)``. Returns both
    step results for model-specific checks.
    """
    ops = ops if ops is not None else OpsConfig()
    model_type = model_type if model_type is not None else config.model_type
    pair = build_pair(
        config,
        get_model_class(model_type, architecture, use_hf=True),
        get_model_class(model_type, architecture, backend=backend),
        seed=seed,
    )
    batch = batch if batch is not None else causal_lm_batch(config, seed=seed)
    upstream = run_step(pair.upstream, batch, seed=seed)
    with bound_ops(ops):
        candidate = run_step(pair.generated, batch, seed=seed)

    if ops.is_eager:
        assert_step_parity(upstream, candidate, tolerance=tolerance or EAGER_TOLERANCE, logits="equal")
    else:
        assert_step_parity(
            upstream,
            candidate,
            tolerance=tolerance or KERNEL_TOLERANCE,
            logits="skip" if candidate.logits is None else "close",
        )
    return upstream, candidate
