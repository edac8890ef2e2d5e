"""Parity of a generated model against upstream transformers: same weights, same batch, compared outputs.

The contract (docs/design.md, "The parity contract"): with every slot eager, logits are bitwise equal (fp32 and bf16) and
the loss, the aux loss and every parameter's gradient match within ``EAGER_TOLERANCE`` (fp32) or
``BF16_TOLERANCE`` (bf16); with kernels bound, the loss and the gradients match within
``KERNEL_TOLERANCE`` (logits too, where the kernel returns them), and every bound kernel must have been
called: a parity run that never went through a kernel proves nothing about it, so it fails.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import torch
from transformers import PreTrainedConfig, PreTrainedModel

from modelgraft.models.loader import get_model_class
from modelgraft.models.ops import SLOTS, OpsConfig, bound_ops
from modelgraft.models.ops.binding import restore_bindings
from modelgraft.models.testing.batches import causal_lm_batch
from modelgraft.models.testing.seed import seed_everything
from modelgraft.models.testing.upstream_steps import UPSTREAM_STEPS, step_key

__all__ = [
    "BF16_KERNEL_TOLERANCE",
    "BF16_TOLERANCE",
    "EAGER_TOLERANCE",
    "KERNEL_TOLERANCE",
    "ModelPair",
    "StepResult",
    "Tolerance",
    "UpstreamStepError",
    "assert_step_parity",
    "assert_within",
    "build_generated",
    "build_pair",
    "build_upstream",
    "check_parity",
    "counting_calls",
    "eager_slots_on_one_thread",
    "randomize_constant_parameters",
    "run_step",
    "tolerance_for",
]

LogitsCheck = Literal["equal", "close", "skip"]


class UpstreamStepError(Exception):
    """Upstream's own model failed to build or to run its training step on the config and batch a check gave it.

    The inputs are at fault (a tiny config upstream cannot run, a batch it does not take), never the generated
    model, which the check had not yet run: the scaffold's smoke check says so instead of blaming the new model.
    """


@dataclass(frozen=True)
class Tolerance:
    """``torch.allclose`` bounds, or with ``norm_wise`` the tensor-wide ``|a - b| <= atol + rtol * |b|`` (2-norms).

    Norm-wise bounds are for bf16 kernels that round differently from upstream: a gradient element near
    zero may then differ by more than its own size while the tensor as a whole agrees to a bf16 ulp or two.
    """

    rtol: float
    atol: float
    norm_wise: bool = False


#: Same upstream code on both sides, so only reassociation by a patched body may differ.
EAGER_TOLERANCE = Tolerance(rtol=1e-5, atol=1e-6)
#: fp32 kernels that reorder reductions (chunked loss sums chunk by chunk).
KERNEL_TOLERANCE = Tolerance(rtol=1e-4, atol=1e-5)
#: bf16, all slots eager (or a reference kernel, which recomputes upstream's formula in the same order):
#: the same code on both sides, so only what a patched body reassociates may differ, by two bf16 ulps at
#: most (bf16 keeps 8 significant bits: one ulp is 2**-8 relative, 3.9e-3). The zoo is bitwise equal.
BF16_TOLERANCE = Tolerance(rtol=8e-3, atol=1e-5)
#: bf16 kernels, tensor-wide: the chunked loss accumulates its weight gradient in fp32 and rounds once,
#: where upstream's bf16 matmul rounds as it goes, and that difference flows back through every layer;
#: the zoo's worst gradient is 1.4% apart in norm (3 ulps), so 3e-2 leaves twice that. ``atol`` is the
#: floor for gradients that vanish in exact arithmetic (a key bias: softmax ignores a shift shared by all
#: keys, or a scalar gate like diffllama's lambda_q1), whose bf16 values are rounding noise of norm ~1e-4
#: on the tiny models.
BF16_KERNEL_TOLERANCE = Tolerance(rtol=3e-2, atol=1e-4, norm_wise=True)


def tolerance_for(dtype: torch.dtype, *, kernels: bool) -> Tolerance:
    """The default tolerance of a parity run in ``dtype``, with (``kernels``) or without bound kernels."""
    if dtype == torch.float32:
        return KERNEL_TOLERANCE if kernels else EAGER_TOLERANCE
    if dtype == torch.bfloat16:
        return BF16_KERNEL_TOLERANCE if kernels else BF16_TOLERANCE
    raise ValueError(f"no parity tolerance for {dtype} (fp32 and bf16 have one)")


@dataclass(frozen=True)
class StepResult:
    """What one forward + backward produced; ``grads`` maps every parameter name to its grad (or None).

    ``aux_loss`` is the MoE auxiliary loss where the model returned one (None otherwise); ``calls`` counts
    the calls of each bound kernel, by slot, during the step (empty when nothing was bound).
    """

    loss: torch.Tensor
    logits: torch.Tensor | None
    grads: Mapping[str, torch.Tensor | None]
    aux_loss: torch.Tensor | None = None
    calls: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class ModelPair:
    upstream: PreTrainedModel
    generated: PreTrainedModel


#: Spread given to a parameter that starts out constant (norm weights, biases), so a slot that drops it
#: (a norm kernel that ignores ``weight``, a dropped ``offset``) changes the result.
_CONSTANT_SPREAD = 0.2


@torch.no_grad()
def randomize_constant_parameters(model: PreTrainedModel, *, seed: int = 0) -> list[str]:
    """Add N(0, 0.2^2) noise to every floating parameter of more than one element whose values are all equal.

    Norm weights start as ones (or zeros, Gemma's ``1 + weight``) and biases as zeros: a kernel that
    ignores them, or a guard that drops an ``offset``, would still match upstream. Returns the names
    changed. Deterministic in ``seed``.
    """
    generator = torch.Generator().manual_seed(seed)
    changed = []
    for name, param in model.named_parameters():
        if not param.is_floating_point() or param.numel() < 2:
            continue
        flat = param.detach().reshape(-1)
        if not bool((flat == flat[0]).all()):
            continue
        noise = torch.randn(param.shape, generator=generator, dtype=torch.float32) * _CONSTANT_SPREAD
        param.add_(noise.to(device=param.device, dtype=param.dtype))
        changed.append(name)
    return changed


@contextmanager
def eager_slots_on_one_thread() -> Iterator[None]:
    """Every slot eager and one torch thread inside the block; both restored after it.

    Per-model tests run under it (as an autouse fixture) so a kernel one test binds, or a thread count it
    sets, never reaches the next test, and reductions run in one order whatever the machine's core count.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with bound_ops(OpsConfig()):
            yield
    finally:
        torch.set_num_threads(threads)


def build_pair(
    config: PreTrainedConfig,
    upstream_cls: type[PreTrainedModel],
    generated_cls: type[PreTrainedModel],
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    randomize_constants: bool = True,
) -> ModelPair:
    """Both classes from copies of ``config``, in ``dtype`` on ``device``, train mode, the generated one loaded
    with upstream's weights.

    ``randomize_constants``: first give upstream's constant-initialized parameters (norm weights, biases)
    distinct values (:func:`randomize_constant_parameters`), so a dropped weight or offset shows.
    """
    upstream = build_upstream(
        config, upstream_cls, seed=seed, dtype=dtype, device=device, randomize_constants=randomize_constants
    )
    generated = build_generated(config, generated_cls, upstream.state_dict(), dtype=dtype, device=device)
    return ModelPair(upstream=upstream, generated=generated)


def build_upstream(
    config: PreTrainedConfig,
    upstream_cls: type[PreTrainedModel],
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    randomize_constants: bool = True,
) -> PreTrainedModel:
    """Upstream's side of :func:`build_pair`: initialized from ``seed``, constants randomized, in train mode."""
    seed_everything(seed)
    upstream = upstream_cls(copy.deepcopy(config)).float()
    if randomize_constants:
        randomize_constant_parameters(upstream, seed=seed)
    return upstream.to(device=device, dtype=dtype).train()


def build_generated(
    config: PreTrainedConfig,
    generated_cls: type[PreTrainedModel],
    weights: Mapping[str, torch.Tensor],
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> PreTrainedModel:
    """The generated side of :func:`build_pair`: upstream's ``weights`` loaded strictly, in train mode."""
    generated = generated_cls(copy.deepcopy(config)).to(device=device, dtype=dtype).train()
    generated.load_state_dict(weights, strict=True)
    return generated


def run_step(model: PreTrainedModel, batch: Mapping[str, Any], *, seed: int = 0) -> StepResult:
    """One training forward + backward from zeroed grads, reseeded so both sides draw the same randomness."""
    model.zero_grad(set_to_none=True)
    seed_everything(seed)
    output = model(**batch, use_cache=False)
    if output.loss is None:
        raise AssertionError(f"{type(model).__name__} returned no loss; the batch needs labels")
    output.loss.backward()
    aux = getattr(output, "aux_loss", None)
    if aux is not None and not isinstance(aux, torch.Tensor):
        aux = torch.tensor(float(aux))  # the patched head's int 0 (no sparse layer recorded router logits)
    return StepResult(
        loss=output.loss.detach(),
        logits=None if output.logits is None else output.logits.detach(),
        grads={
            name: None if param.grad is None else param.grad.detach().clone()
            for name, param in model.named_parameters()
        },
        aux_loss=None if aux is None else aux.detach(),
    )


def assert_within(what: str, expected: torch.Tensor, actual: torch.Tensor, tolerance: Tolerance) -> None:
    """``actual`` has ``expected``'s shape and dtype and lies within ``tolerance`` of it; fails naming ``what``."""
    if expected.shape != actual.shape:
        raise AssertionError(f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if expected.dtype != actual.dtype:
        raise AssertionError(f"{what}: dtype {actual.dtype}, expected {expected.dtype}")
    if tolerance.norm_wise:
        error = (actual.float() - expected.float()).norm().item()
        bound = tolerance.atol + tolerance.rtol * expected.float().norm().item()
        if not error <= bound:
            raise AssertionError(
                f"{what}: |diff| {error:.3e} exceeds {bound:.3e} (norm-wise rtol={tolerance.rtol}, atol={tolerance.atol})"
            )
        return
    if not torch.allclose(actual.float(), expected.float(), rtol=tolerance.rtol, atol=tolerance.atol):
        diff = (actual.float() - expected.float()).abs().max().item()
        raise AssertionError(f"{what}: max |diff| {diff:.3e} exceeds rtol={tolerance.rtol}, atol={tolerance.atol}")


def assert_step_parity(
    upstream: StepResult,
    candidate: StepResult,
    *,
    tolerance: Tolerance = EAGER_TOLERANCE,
    logits: LogitsCheck = "equal",
) -> None:
    """Raise AssertionError naming the first output or parameter gradient where ``candidate`` diverges.

    The aux loss is compared like the logits (equal when ``logits == "equal"``, else within ``tolerance``)
    whenever either side returned one.
    """
    if logits != "skip":
        if upstream.logits is None or candidate.logits is None:
            raise AssertionError(f"logits check {logits!r} needs logits from both sides")
        if candidate.logits.dtype != upstream.logits.dtype:
            raise AssertionError(f"logits are {candidate.logits.dtype}, upstream's are {upstream.logits.dtype}")
        if logits == "equal" and not torch.equal(candidate.logits, upstream.logits):
            diff = (candidate.logits.float() - upstream.logits.float()).abs().max().item()
            raise AssertionError(f"logits differ from upstream (max |diff| {diff:.3e}); they must be equal")
        if logits == "close":
            assert_within("logits", upstream.logits, candidate.logits, tolerance)
    assert_within("loss", upstream.loss, candidate.loss, tolerance)

    if (upstream.aux_loss is None) != (candidate.aux_loss is None):
        raise AssertionError(
            f"aux loss: upstream {'none' if upstream.aux_loss is None else 'present'}, "
            f"generated {'none' if candidate.aux_loss is None else 'present'}"
        )
    if upstream.aux_loss is not None and candidate.aux_loss is not None:
        if logits == "equal" and not torch.equal(candidate.aux_loss, upstream.aux_loss):
            diff = (candidate.aux_loss.float() - upstream.aux_loss.float()).abs().max().item()
            raise AssertionError(f"aux loss differs from upstream (|diff| {diff:.3e}); it must be equal")
        assert_within("aux loss", upstream.aux_loss, candidate.aux_loss, tolerance)

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
            assert_within(f"grad of {name}", expected, actual, tolerance)


@contextmanager
def counting_calls(calls: Counter[str]) -> Iterator[None]:
    """Count, by slot name, the calls of every kernel bound on entry; restores the bindings on exit."""
    previous = {name: slot.bound for name, slot in SLOTS.items()}
    try:
        for name, bound in previous.items():
            if bound is not None:
                SLOTS[name].bind(_counted(name, bound.fn, calls), name=bound.name)
        yield
    finally:
        restore_bindings(previous)


def _counted(slot: str, kernel: Callable[..., Any], calls: Counter[str]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        calls[slot] += 1
        return kernel(*args, **kwargs)

    return call


@contextmanager
def _kernels_bound(kernels: Mapping[str, Callable[..., Any]]) -> Iterator[None]:
    """``kernels`` (slot name -> function) bound on top of the current bindings, restored on exit."""
    unknown = sorted(set(kernels) - set(SLOTS))
    if unknown:
        raise ValueError(f"no op slot named {unknown} (slots: {', '.join(SLOTS)})")
    previous = {name: SLOTS[name].bound for name in kernels}
    try:
        for name, kernel in kernels.items():
            SLOTS[name].bind(kernel, name=f"{getattr(kernel, '__module__', '?')}.{getattr(kernel, '__name__', '?')}")
        yield
    finally:
        restore_bindings(previous)


def check_parity(
    config: PreTrainedConfig,
    architecture: str,
    *,
    backend: str = "gpu",
    model_type: str | None = None,
    ops: OpsConfig | None = None,
    kernels: Mapping[str, Callable[..., Any]] | None = None,
    batch: Mapping[str, Any] | None = None,
    tolerance: Tolerance | None = None,
    logits: LogitsCheck | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> tuple[StepResult, StepResult]:
    """Upstream ``transformers.<architecture>`` vs the registered generated class, one training step each.

    ``ops`` binds kernels by name (an ``OpsConfig``), ``kernels`` binds functions by slot name on top of
    it (reference kernels). With nothing bound, logits must be equal and the rest within
    ``tolerance_for(dtype, kernels=False)``; with kernels bound, everything within
    ``tolerance_for(dtype, kernels=True)``, logits compared only if the kernel returned them, and every
    bound kernel must have been called at least once (the returned candidate's ``calls`` has the counts).
    ``tolerance`` and ``logits`` override those defaults. ``batch`` defaults to
    ``causal_lm_batch(config)``; both models and the batch's tensors go to ``device``. Returns both step
    results for model-specific checks.
    """
    ops = ops if ops is not None else OpsConfig()
    kernels = dict(kernels or {})
    model_type = model_type if model_type is not None else config.model_type
    upstream_cls = get_model_class(model_type, architecture, use_hf=True)
    batch = batch if batch is not None else causal_lm_batch(config, seed=seed)
    batch = {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}

    def upstream_side() -> tuple[dict[str, torch.Tensor], StepResult]:
        try:
            model = build_upstream(config, upstream_cls, seed=seed, dtype=dtype, device=device)
            # Taken before the step: a forward in train mode may update buffers (running statistics).
            weights = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
            return weights, run_step(model, batch, seed=seed)
        except Exception as error:
            raise UpstreamStepError(
                f"upstream {upstream_cls.__name__} itself fails on this config and batch "
                f"({type(error).__name__}: {error})"
            ) from error

    # Upstream's side depends on none of what this run binds: computed once per inputs (upstream_steps.py).
    key = step_key(upstream_cls, config, batch, seed=seed, dtype=dtype, device=device)
    weights, upstream, _ = UPSTREAM_STEPS.get_or_compute(key, upstream_side)
    generated_cls = get_model_class(model_type, architecture, backend=backend)
    seed_everything(seed)
    generated = build_generated(config, generated_cls, weights, dtype=dtype, device=device)
    calls: Counter[str] = Counter()
    with bound_ops(ops), _kernels_bound(kernels):
        bound = {name: slot.bound_kernel_name for name, slot in SLOTS.items() if slot.bound is not None}
        with counting_calls(calls):
            candidate = run_step(generated, batch, seed=seed)
    candidate = StepResult(
        loss=candidate.loss,
        logits=candidate.logits,
        grads=candidate.grads,
        aux_loss=candidate.aux_loss,
        calls=MappingProxyType(dict(calls)),
    )

    never = {slot: name for slot, name in bound.items() if calls[slot] == 0}
    if never:
        listed = ", ".join(f"{name!r} in slot {slot!r}" for slot, name in sorted(never.items()))
        raise AssertionError(
            f"bound kernel(s) never called by the generated {architecture}: {listed}; its guard is missing, "
            "disabled or unreachable, so this run compared upstream with upstream"
        )

    if not bound:
        expected_logits: LogitsCheck = "equal"
    else:
        expected_logits = "skip" if candidate.logits is None else "close"
    assert_step_parity(
        upstream,
        candidate,
        tolerance=tolerance or tolerance_for(dtype, kernels=bool(bound)),
        logits=logits or expected_logits,
    )
    return upstream, candidate
