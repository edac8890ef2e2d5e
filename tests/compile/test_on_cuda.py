"""The zoo's first decoder layers compiled by inductor on a CUDA device: one graph, trained as eagerly.

The rest of this folder compiles on a CPU (aot_eager, and inductor's C++ for the kernels that need it). On a device
inductor writes Triton kernels instead, and a training user there binds the GPU kernel families. Selected by the
``gpu`` marker (``python -m pytest -m gpu``; ``.ci/gpu`` runs it with the GPU suite); without a CUDA device every
compiled case skips, naming the reason, and a case whose family's package is not installed skips naming the
package. Nothing is mocked: where they skip, these kernels and Triton's code were not exercised.

Which layers: the first decoder layer and the first sparse one of every text and hybrid model of the zoo
(``layers.LAYERS``, those the parity suites compile on a CPU), each a copy moved to the device with its recorded
inputs. Kernel cases: slots unbound (upstream's code), and each GPU kernel family that serves a slot the layer calls
(``liger``; Qwen3.5's Gated DeltaNet also ``fla`` and ``causal_conv1d``), bound alone on those slots; where a kernel
refuses the layer's formulation (a ``ValueError`` naming its family: Liger's rotary takes no interleaved pairs), the
case skips with the refusal. Each case is compiled by ``torch.compile(layer, fullgraph=True)``, so a graph break
fails it, naming the break.

What "trains as eagerly" means differs by dtype. In fp32 the compiled step's output, input gradient and every
parameter's gradient lie within :data:`FP32_TOLERANCE` of the eager step's, tensor-wide: Triton's kernels fuse the
elementwise work and reassociate reductions, which moves a tensor by a few fp32 roundings of its norm, but can move
an element near zero of a tensor of large scale by more than its own size (compiled by inductor's C++ on a CPU,
HyperCLOVA X's input gradient, whose elements reach 203, lay 2.6e-7 of its norm apart, one element by 5.3e-5).

In bf16 the two steps are not compared with each other: fused kernels keep values in fp32 between operators where
eager rounds after each, and where a layer clamps (DeepSeek-V4's SwiGLU) an element rounded across the limit takes
the other branch (compiled by inductor's C++ on a CPU, DeepSeek-V4's shared-expert weight gradient differed by 7% in
norm). Both are measured against the same layer run eagerly in fp32 from the bf16 weights and inputs: each tensor
of the compiled step lies within the parity suites' bf16 kernel tolerance of that reference (norm-wise rtol 3e-2,
atol 1e-4), or, where the eager bf16 step is itself further off, at most :data:`BF16_ERROR_RATIO` times as far as
it. The ratio alone is no test for a small tensor: the 3-element gradient of DeepSeek-V4's ``ffn_hc.scale`` lay 9
times further from fp32 than eager's, 3.4% of its norm where eager's was 0.4%. A layer with routed experts runs in
fp32 only: its router picks each token's experts by a top-k, and a near-tie that bf16 rounds one way compiled and
the other way eagerly sends the token to another expert (Qwen3.5-MoE's first layer: its router weight's gradient
15% of its norm from fp32, eager's 0.6%).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

from modelgraft.models.ops import KERNEL_FAMILIES
from modelgraft.models.testing.layer_compile import is_sparse
from modelgraft.models.testing.parity import BF16_KERNEL_TOLERANCE, Tolerance, assert_within

from .layers import LAYERS, LayerCase, Step, bound, called_slots, layer_and_inputs, training_step

DEVICE = "cuda"

#: Kernel families a training run on a CUDA device binds: those that need one, and no process group.
DEVICE_FAMILIES: tuple[str, ...] = tuple(
    sorted(name for name, family in KERNEL_FAMILIES.items() if family.requires_cuda and not family.distributed)
)

#: fp32, tensor-wide: about ten times what the 19 layers compiled by inductor's C++ on a CPU moved (Qwen3.5's Gated
#: DeltaNet layer 9.7e-6 of a tensor's norm, whose chunked recurrence exponentiates cumulative sums; the others 2e-7
#: to 2e-6).
FP32_TOLERANCE = Tolerance(rtol=1e-4, atol=1e-5, norm_wise=True)
#: bf16, beyond the kernel tolerance: the compiled step's distance (2-norm) from the fp32 reference, at most this
#: many times eager bf16's.
BF16_ERROR_RATIO = 2.0

#: The layers the parity suites compile on a CPU: every text and hybrid model's first and first sparse layer.
COMPILED = [layer for layer in LAYERS if layer.compiled]


def kernel_cases(layer: LayerCase) -> list[str]:
    """``unbound``, then each device family that serves a slot the layer calls."""
    called = called_slots(layer)
    return ["unbound", *(family for family in DEVICE_FAMILIES if KERNEL_FAMILIES[family].slots & called)]


def dtypes(layer: LayerCase) -> list[torch.dtype]:
    """fp32, and bf16 for a layer without routed experts (module docstring: a router's top-k in bf16)."""
    module, _, _ = layer_and_inputs(layer, torch.float32)
    return [torch.float32] if is_sparse(module) else [torch.float32, torch.bfloat16]


CASES = [
    pytest.param(layer, kernels, dtype, id=f"{layer.id}-{kernels}-{str(dtype).removeprefix('torch.')}")
    for layer in COMPILED
    for kernels in kernel_cases(layer)
    for dtype in dtypes(layer)
]


def on_device(layer: LayerCase, dtype: torch.dtype) -> tuple[nn.Module, tuple[object, ...], dict[str, object]]:
    """A copy of the layer on :data:`DEVICE` in ``dtype``, and its recorded inputs moved there."""
    module, args, kwargs = layer_and_inputs(layer, dtype)
    moved_args, moved_kwargs = pytree.tree_map_only(torch.Tensor, lambda tensor: tensor.to(DEVICE), (args, kwargs))
    return copy.deepcopy(module).to(DEVICE), moved_args, moved_kwargs


def named_tensors(step: Step) -> dict[str, torch.Tensor | None]:
    """Every output and gradient of ``step``, by a name a failure can print."""
    outputs = {f"output {index}": output for index, output in enumerate(step.outputs)}
    return outputs | {f"gradient of {name}": grad for name, grad in step.grads.items()}


def assert_matches_in_fp32(compiled: Step, eager: Step) -> None:
    """Every output and gradient of the compiled fp32 step within :data:`FP32_TOLERANCE` of the eager one."""
    actual, expected = named_tensors(compiled), named_tensors(eager)
    assert actual.keys() == expected.keys()
    for name, want in expected.items():
        got = actual[name]
        assert (got is None) == (want is None), f"{name}: {got} against {want}"
        if want is not None:
            assert_within(name, want, got, FP32_TOLERANCE)


def assert_no_further_from_fp32(compiled: Step, eager: Step, reference: Step) -> None:
    """Every output and gradient of the compiled bf16 step within the bf16 kernel tolerance of the fp32 ``reference``
    (2-norms), or at most :data:`BF16_ERROR_RATIO` times as far from it as the eager bf16 step's."""
    actual, expected, exact = named_tensors(compiled), named_tensors(eager), named_tensors(reference)
    assert actual.keys() == expected.keys() == exact.keys()
    tolerance = BF16_KERNEL_TOLERANCE
    for name, truth in exact.items():
        got, want = actual[name], expected[name]
        assert (got is None) == (want is None) == (truth is None), f"{name}: {got} and {want} against {truth}"
        if truth is None:
            continue
        error = (got.float() - truth).norm().item()
        eager_error = (want.float() - truth).norm().item()
        bound = max(tolerance.atol + tolerance.rtol * truth.norm().item(), BF16_ERROR_RATIO * eager_error)
        assert error <= bound, (
            f"{name}: compiled bf16 is {error:.3e} from fp32, eager bf16 {eager_error:.3e} (at most {bound:.3e})"
        )


def fp32_reference(module: nn.Module, args: tuple[object, ...], kwargs: dict[str, object]) -> Step:
    """The training step of ``module`` in fp32: its bf16 weights and floating inputs upcast, run eagerly."""
    upcast = copy.deepcopy(module).float()
    args, kwargs = pytree.tree_map_only(
        torch.Tensor, lambda tensor: tensor.float() if tensor.is_floating_point() else tensor, (args, kwargs)
    )
    return training_step(upcast, upcast, args, kwargs)


def test_every_device_family_that_serves_a_decoder_layer_slot_is_in_a_case() -> None:
    assert set(DEVICE_FAMILIES) == {"liger", "fla", "causal_conv1d"}
    assert {kernels for layer in COMPILED for kernels in kernel_cases(layer)} == {"unbound", *DEVICE_FAMILIES}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch.cuda.is_available() is False")
@pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")
@pytest.mark.parametrize(("layer", "kernels", "dtype"), CASES)
def test_the_layer_compiled_by_inductor_on_the_device_is_one_graph_and_trains_as_it_does_eagerly(
    layer: LayerCase, kernels: str, dtype: torch.dtype
) -> None:
    if kernels != "unbound" and (why := KERNEL_FAMILIES[kernels].unavailable_reason()) is not None:
        pytest.skip(f"{kernels} not exercised: {why}")
    module, args, kwargs = on_device(layer, dtype)
    with bound(layer, kernels):
        try:
            eager = training_step(module, module, args, kwargs)
        except ValueError as refusal:  # a family's kernel that does not compute this layer's formulation says so
            if not str(refusal).startswith(f"{kernels} "):
                raise
            pytest.skip(f"{kernels} not exercised on {layer.id}: its kernel refuses the formulation ({refusal})")
        compiled = training_step(torch.compile(module, fullgraph=True), module, args, kwargs)
        if dtype == torch.float32:
            assert_matches_in_fp32(compiled, eager)
        else:
            assert_no_further_from_fp32(compiled, eager, fp32_reference(module, args, kwargs))
