"""The ``compiled`` family: RMSNorm, the rotary embedding and the gated activation, each the eager reference compiled
by inductor.

Against the references (``modelgraft.models.ops.kernels.eager``), forward and every gradient: within rtol 1e-5,
atol 1e-5 in fp32, and in bf16 within the bf16 kernels' tolerance (``BF16_KERNEL_TOLERANCE``: 3% in norm), since
inductor computes in fp32 and rounds once where the reference rounds after each bf16 operation (a gradient entry
near zero can be an ulp of its neighbours apart). The options of the zoo's formulations each get a case: Llama's
cast-then-scale and Gemma's fp32 scale by ``1 + weight``, DeepSeek-V4's weightless norm; rotate-half, and GLM's
pairs over a partial rotary width with cos repeated pairwise; Cohere's upcast in bf16; the gated activation under
SiLU in fp32 and bf16 and GELU's tanh form (Gemma's) in fp32, and the whole gated MLP around it. One set of
options compiles at most twice across sequence lengths (a static graph, then one with the sizes dynamic); traced
by an outer compile, the kernels are plain torch in the outer graph. In a decoder layer, alone (Llama's) and with
the other compiled family (Qwen3-MoE's sparse layer): test_kernels.py. Skipped, saying why, where inductor finds
no C++ compiler.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from modelgraft.models.ops.kernels import compiled_references, cpp_compiler_missing, eager, load_kernel
from modelgraft.models.testing.parity import BF16_KERNEL_TOLERANCE

pytestmark = [
    pytest.mark.skipif(cpp_compiler_missing() is not None, reason=cpp_compiler_missing() or ""),
    pytest.mark.usefixtures("inductor_in_process"),
    # Traced, the gated activation looks its module up through ``functools.cache`` (``eager.activation_module``),
    # which gives the same module for a name every time: sound, as test_decoder_layers says.
    pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`"),
]

FP32_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 48, 4, 2, 16, 56

RMS_NORMS: dict[str, tuple[torch.dtype, dict[str, Any], bool]] = {
    "llama": (torch.float32, {}, True),
    "gemma": (torch.float32, {"offset": 1.0}, True),
    "deepseek_v4_weightless": (torch.float32, {}, False),
    "llama_bf16": (torch.bfloat16, {}, True),
}
ROPES: dict[str, tuple[torch.dtype, dict[str, Any], int]] = {
    "llama": (torch.float32, {}, HEAD_DIM),
    "glm_partial_pairs": (torch.float32, {"interleaved": True, "repeat_cos": True}, HEAD_DIM // 2),
    "cohere_bf16": (torch.bfloat16, {"interleaved": True, "upcast": True}, HEAD_DIM),
}

#: Gated activations, (``hidden_act``, dtype): SiLU (Llama's and most others') in both dtypes, and Gemma's tanh
#: GELU, another activation module: each case is an inductor compile (about 2 s cold), and the dtype's path does
#: not depend on the activation.
GLU_CASES: dict[str, tuple[str, torch.dtype]] = {
    "silu": ("silu", torch.float32),
    "silu_bf16": ("silu", torch.bfloat16),
    "gelu_pytorch_tanh": ("gelu_pytorch_tanh", torch.float32),
}


def _step(kernel: Any, inputs: list[torch.Tensor | None], *args: Any, **options: Any) -> list[torch.Tensor]:
    """Outputs and the gradients of every input of ``kernel`` under a loss weighing each element at random."""
    leaves = [None if t is None else t.detach().clone().requires_grad_(True) for t in inputs]
    out = kernel(*leaves, *args, **options)
    outputs = list(out) if isinstance(out, tuple) else [out]
    generator = torch.Generator().manual_seed(1)
    loss = sum((o.float() * torch.randn(o.shape, generator=generator)).sum() for o in outputs)
    wanted = [t for t in leaves if t is not None]
    return [o.detach() for o in outputs] + list(torch.autograd.grad(loss, wanted))


def _norm_inputs(dtype: torch.dtype, weighted: bool, tokens: int = 7) -> list[torch.Tensor | None]:
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, tokens, HIDDEN, generator=generator).to(dtype)
    weight = (1 + 0.1 * torch.randn(HIDDEN, generator=generator)).to(dtype)
    return [hidden, weight if weighted else None]


def _rope_inputs(dtype: torch.dtype, rotary: int, tokens: int = 7) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, HEADS, tokens, HEAD_DIM, generator=generator).to(dtype)
    k = torch.randn(2, KV_HEADS, tokens, HEAD_DIM, generator=generator).to(dtype)
    angles = torch.randn(2, tokens, rotary, generator=generator)
    return [q, k, angles.cos().to(dtype), angles.sin().to(dtype)]


def _glu_inputs(dtype: torch.dtype, tokens: int = 7) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(2, tokens, INTERMEDIATE, generator=generator).to(dtype) for _ in range(2)]


def _assert_close(actual: list[torch.Tensor], expected: list[torch.Tensor], dtype: torch.dtype) -> None:
    assert len(actual) == len(expected)
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        if dtype == torch.float32:
            torch.testing.assert_close(got, want, **FP32_TOLERANCE, msg=lambda m, i=i: f"output or gradient {i}: {m}")
            continue
        assert got.dtype == want.dtype
        error, size = (got.float() - want.float()).norm().item(), want.float().norm().item()
        bound = BF16_KERNEL_TOLERANCE.atol + BF16_KERNEL_TOLERANCE.rtol * size
        assert error <= bound, f"output or gradient {i}: |diff| {error:.3e} > {bound:.3e}"


def _graphs(function: Any) -> int:
    """Graphs dynamo holds for the code object a compiled function of the family wraps."""
    return len(torch._dynamo.eval_frame._debug_get_cache_entry_list(function._torchdynamo_orig_callable.__code__))


@pytest.mark.parametrize("case", sorted(RMS_NORMS))
def test_the_compiled_rms_norm_matches_the_reference_forward_and_backward(case: str) -> None:
    dtype, options, weighted = RMS_NORMS[case]
    inputs = _norm_inputs(dtype, weighted)
    actual = _step(load_kernel("rms_norm", "compiled"), inputs, 1e-6, **options)
    _assert_close(actual, _step(eager.rms_norm, inputs, 1e-6, **options), dtype)


@pytest.mark.parametrize("case", sorted(ROPES))
def test_the_compiled_rope_matches_the_reference_forward_and_backward(case: str) -> None:
    dtype, options, rotary = ROPES[case]
    inputs = _rope_inputs(dtype, rotary)
    actual = _step(load_kernel("rope", "compiled"), inputs, **options)
    _assert_close(actual, _step(eager.rope, inputs, **options), dtype)


@pytest.mark.parametrize("case", sorted(GLU_CASES))
def test_the_compiled_glu_activation_matches_the_reference_forward_and_backward(case: str) -> None:
    activation, dtype = GLU_CASES[case]
    inputs = _glu_inputs(dtype)
    actual = _step(load_kernel("glu_activation", "compiled"), inputs, activation)
    _assert_close(actual, _step(eager.glu_activation, inputs, activation), dtype)


def test_the_compiled_gated_mlp_matches_the_reference_forward_and_backward() -> None:
    """DeepSeek-V3's shared experts and dense layers guard their MLP whole: the projections around the gated
    activation, every weight's gradient included (fp32; the activation in bf16 is the case above)."""
    dtype = torch.float32
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, HIDDEN, generator=generator).to(dtype)
    gate, up = (0.1 * torch.randn(INTERMEDIATE, HIDDEN, generator=generator).to(dtype) for _ in range(2))
    down = 0.1 * torch.randn(HIDDEN, INTERMEDIATE, generator=generator).to(dtype)
    inputs = [x, gate, up, down]
    actual = _step(load_kernel("gated_mlp", "compiled"), inputs, "silu")
    _assert_close(actual, _step(eager.gated_mlp, inputs, "silu"), dtype)


def test_one_set_of_options_compiles_at_most_twice_across_sequence_lengths() -> None:
    kernel = load_kernel("rms_norm", "compiled")
    for tokens in (5, 9, 13, 40):
        hidden, weight = _norm_inputs(torch.float32, True, tokens)
        kernel(hidden, weight, 1e-6)
    key = (torch.float32, torch.float32, 3, HIDDEN, 1e-6, 0.0, None)
    assert _graphs(compiled_references.compiled_function(compiled_references._rms_norm, key)) == 2


def test_traced_by_an_outer_compile_the_kernels_are_plain_torch_in_its_graph() -> None:
    rms_norm, rope = load_kernel("rms_norm", "compiled"), load_kernel("rope", "compiled")
    glu_activation = load_kernel("glu_activation", "compiled")

    def block(hidden: torch.Tensor, weight: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos, sin, gate, up) -> Any:
        q, k = rope(q, k, cos, sin)
        return rms_norm(hidden, weight, 1e-6), q, k, glu_activation(gate, up, "silu")

    counter = torch._dynamo.testing.CompileCounter()
    before = len(compiled_references._COMPILED)
    inputs = (*_norm_inputs(torch.float32, True), *_rope_inputs(torch.float32, HEAD_DIM), *_glu_inputs(torch.float32))
    torch.compile(block, backend=counter, fullgraph=True)(*inputs)
    assert counter.frame_count == 1
    assert len(compiled_references._COMPILED) == before  # nothing compiled apart: the outer graph holds the references
