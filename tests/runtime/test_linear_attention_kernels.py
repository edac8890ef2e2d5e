"""The linear-attention kernels (Qwen3.5's Gated DeltaNet slots) against upstream's undecorated torch bodies.

Upstream's functions are decorated to run FLA or causal-conv1d where installed (and made ``kernels`` function
modules); :func:`~modelgraft.models.testing.hub_decorated.torch_body` is the torch body the generated model's eager
path keeps. The reference kernels (``eager``) and the ``chunked_delta`` family must recompute it, gradients
included, on grouped heads (q and k with fewer heads than v, as upstream's mixer hands them); with ``cu_seqlens``
the chunked kernels keep packed documents independent.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as upstream

from modelgraft.models.ops import KERNEL_FAMILIES, SLOTS, KernelUnavailableError, OpsConfig, bind_ops
from modelgraft.models.ops.kernels import delta_rule, eager
from modelgraft.models.ops.kernels.linear_attention_reference import grouped_query_key
from modelgraft.models.testing.hub_decorated import torch_body
from modelgraft.models.testing.parity import Tolerance, assert_within
from modelgraft.models.testing.preloaded_python import run_code

UPSTREAM_CHUNK = torch_body(upstream.torch_chunk_gated_delta_rule)
UPSTREAM_RECURRENT = torch_body(upstream.torch_recurrent_gated_delta_rule)
UPSTREAM_CONV = torch_body(upstream.causal_conv1d_fn)
UPSTREAM_CONV_UPDATE = torch_body(upstream.causal_conv1d_update)

#: Two query/key heads of width 8, each serving two of the four value heads of width 12; 70 tokens: a full chunk
#: of 64 and a padded one.
BATCH, LENGTH, KEY_HEADS, HEADS, K_DIM, V_DIM = 2, 70, 2, 4, 8, 12


def _delta_inputs(batch: int = BATCH, length: int = LENGTH, *, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    return {
        "query": randn(batch, length, KEY_HEADS, K_DIM),
        "key": randn(batch, length, KEY_HEADS, K_DIM),
        "value": randn(batch, length, HEADS, V_DIM),
        "g": -torch.rand(batch, length, HEADS, generator=generator),
        "beta": torch.rand(batch, length, HEADS, generator=generator),
    }


def _with_grad(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.clone().requires_grad_(True) for name, tensor in inputs.items()}


def _run_with_grads(kernel: Callable[..., Any], inputs: dict[str, torch.Tensor], **options: Any) -> list[torch.Tensor]:
    """Output, final state and the gradient of every input, for a fixed random projection of both outputs."""
    leaves = _with_grad(inputs)
    state = options.pop("initial_state", None)
    state = None if state is None else state.clone().requires_grad_(True)
    out, final = kernel(**leaves, initial_state=state, output_final_state=True, **options)
    weights = torch.Generator().manual_seed(1)
    loss = (out * torch.randn(out.shape, generator=weights).to(out.device)).sum() + (
        final * torch.randn(final.shape, generator=weights).to(final.device)
    ).sum()
    loss.backward()
    grads = [leaf.grad for leaf in leaves.values()] + ([] if state is None else [state.grad])
    return [out.detach(), final.detach(), *grads]


def _assert_close(actual: list[torch.Tensor], expected: list[torch.Tensor], *, atol: float = 2e-5) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=atol)


@pytest.mark.parametrize(
    "kernel", [delta_rule.chunk_gated_delta_rule, eager.chunk_gated_delta_rule], ids=["chunked_delta", "reference"]
)
@pytest.mark.parametrize("l2norm", [True, False], ids=["l2norm", "raw_qk"])
def test_chunked_delta_rule_matches_upstream_outputs_state_and_gradients(
    kernel: Callable[..., Any], l2norm: bool
) -> None:
    inputs = _delta_inputs()
    initial = torch.randn(BATCH, HEADS, K_DIM, V_DIM, generator=torch.Generator().manual_seed(2))
    options = {"use_qk_l2norm_in_kernel": l2norm, "initial_state": initial}
    expected = _run_with_grads(UPSTREAM_CHUNK, inputs, **options)
    _assert_close(_run_with_grads(kernel, inputs, **options), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_reference_chunked_delta_rule_is_upstreams_bit_for_bit(dtype: torch.dtype) -> None:
    """Upstream's order of operations: in bf16 a MoE router downstream would turn any rounding into other experts."""
    inputs = {name: tensor.to(dtype) for name, tensor in _delta_inputs().items()}
    initial = torch.randn(BATCH, HEADS, K_DIM, V_DIM, generator=torch.Generator().manual_seed(9))
    options = {"initial_state": initial, "output_final_state": True, "use_qk_l2norm_in_kernel": True}
    out, state = eager.chunk_gated_delta_rule(**inputs, **options)
    want_out, want_state = UPSTREAM_CHUNK(**inputs, **options)
    assert torch.equal(out, want_out) and torch.equal(state, want_state)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_chunked_delta_rule_without_cu_seqlens_is_upstreams_bit_for_bit(dtype: torch.dtype) -> None:
    """Upstream's algorithm, only its loop over chunks restructured (unbind, not indexing): the same roundings."""
    inputs = {name: tensor.to(dtype) for name, tensor in _delta_inputs().items()}
    initial = torch.randn(BATCH, HEADS, K_DIM, V_DIM, generator=torch.Generator().manual_seed(10))
    options = {"initial_state": initial, "output_final_state": True, "use_qk_l2norm_in_kernel": True}
    out, state = delta_rule.chunk_gated_delta_rule(**inputs, **options)
    want_out, want_state = UPSTREAM_CHUNK(**inputs, **options)
    assert torch.equal(out, want_out) and torch.equal(state, want_state)


def test_reference_chunked_delta_rule_under_torch_export_is_upstreams_forward_substitution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where torch.export runs, upstream inverts each chunk's system row by row instead of solve_triangular."""
    inputs = _delta_inputs()
    options = {"output_final_state": True, "use_qk_l2norm_in_kernel": True}
    solved, _ = eager.chunk_gated_delta_rule(**inputs, **options)
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)
    out, state = eager.chunk_gated_delta_rule(**inputs, **options)
    want_out, want_state = UPSTREAM_CHUNK(**inputs, **options)
    assert torch.equal(out, want_out) and torch.equal(state, want_state)
    assert not torch.equal(out, solved)  # the other branch ran, on both sides


def test_chunked_delta_rule_keeps_the_query_dtype_and_returns_no_state_unless_asked() -> None:
    inputs = {name: tensor.to(torch.bfloat16) for name, tensor in _delta_inputs().items()}
    out, final = delta_rule.chunk_gated_delta_rule(**inputs, use_qk_l2norm_in_kernel=True)
    want, _ = UPSTREAM_CHUNK(**inputs, use_qk_l2norm_in_kernel=True)
    assert out.dtype == torch.bfloat16 and final is None
    torch.testing.assert_close(out.float(), want.float(), rtol=2e-2, atol=2e-2)


def test_chunked_delta_rule_honours_a_chunk_size_other_than_the_default() -> None:
    inputs = _delta_inputs()
    expected = UPSTREAM_CHUNK(**inputs, chunk_size=16, output_final_state=True)
    actual = delta_rule.chunk_gated_delta_rule(**inputs, chunk_size=16, output_final_state=True)
    _assert_close(list(actual), list(expected))


def test_reference_recurrent_delta_rule_matches_upstream_decode_step() -> None:
    inputs = _delta_inputs(length=1)
    initial = torch.randn(BATCH, HEADS, K_DIM, V_DIM, generator=torch.Generator().manual_seed(3))
    options = {"use_qk_l2norm_in_kernel": True, "initial_state": initial}
    expected = _run_with_grads(UPSTREAM_RECURRENT, inputs, **options)
    _assert_close(_run_with_grads(eager.recurrent_gated_delta_rule, inputs, **options), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_reference_recurrent_delta_rule_is_upstreams_bit_for_bit(dtype: torch.dtype) -> None:
    """Upstream's statements in upstream's order (its queries divided by sqrt(K), not scaled as the chunked's)."""
    inputs = {name: tensor.to(dtype) for name, tensor in _delta_inputs(length=3).items()}
    initial = torch.randn(BATCH, HEADS, K_DIM, V_DIM, generator=torch.Generator().manual_seed(11))
    options = {"initial_state": initial, "output_final_state": True, "use_qk_l2norm_in_kernel": True}
    out, state = eager.recurrent_gated_delta_rule(**inputs, **options)
    want_out, want_state = UPSTREAM_RECURRENT(**inputs, **options)
    assert torch.equal(out, want_out) and torch.equal(state, want_state)


def test_grouped_query_key_repeats_each_key_head_for_its_consecutive_value_heads() -> None:
    inputs = _delta_inputs(length=1)
    query, key = grouped_query_key(inputs["query"], inputs["key"], inputs["value"])
    assert query.shape[2] == key.shape[2] == HEADS
    for head in range(HEADS):
        assert torch.equal(query[:, :, head], inputs["query"][:, :, head // (HEADS // KEY_HEADS)])
        assert torch.equal(key[:, :, head], inputs["key"][:, :, head // (HEADS // KEY_HEADS)])


@pytest.mark.parametrize(
    "kernel",
    [delta_rule.chunk_gated_delta_rule, eager.chunk_gated_delta_rule, eager.recurrent_gated_delta_rule],
    ids=["chunked_delta", "reference", "reference_recurrent"],
)
def test_key_heads_that_do_not_divide_the_value_heads_are_refused(kernel: Callable[..., Any]) -> None:
    inputs = _delta_inputs(length=3)
    inputs["query"], inputs["key"] = (
        inputs["query"][:, :, :1].repeat(1, 1, 3, 1),
        inputs["key"][:, :, :1].repeat(1, 1, 3, 1),
    )
    with pytest.raises(ValueError, match="grouped value attention"):
        kernel(**inputs)


def _documents(lengths: list[int]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    inputs = _delta_inputs(batch=1, length=sum(lengths))
    return inputs, torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def test_packed_documents_give_the_outputs_and_states_each_gives_alone() -> None:
    """Each document of cu_seqlens runs from its own initial state: none leaks into the next."""
    lengths = [70, 5, 33]
    inputs, cu_seqlens = _documents(lengths)
    initial = torch.randn(len(lengths), HEADS, K_DIM, V_DIM, generator=torch.Generator().manual_seed(4))
    packed, states = delta_rule.chunk_gated_delta_rule(
        **inputs, initial_state=initial, output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens
    )
    for index, (start, end) in enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist(), strict=True)):
        alone = {name: tensor[:, start:end] for name, tensor in inputs.items()}
        out, state = UPSTREAM_CHUNK(
            **alone, initial_state=initial[index : index + 1], output_final_state=True, use_qk_l2norm_in_kernel=True
        )
        torch.testing.assert_close(packed[:, start:end], out, rtol=1e-4, atol=2e-5)
        torch.testing.assert_close(states[index : index + 1], state, rtol=1e-4, atol=2e-5)


def test_an_empty_document_passes_its_initial_state_through() -> None:
    inputs, cu_seqlens = _documents([30, 0, 40])
    initial = torch.randn(3, HEADS, K_DIM, V_DIM, generator=torch.Generator().manual_seed(12))
    packed, states = delta_rule.chunk_gated_delta_rule(
        **inputs, initial_state=initial, output_final_state=True, cu_seqlens=cu_seqlens
    )
    second, _ = UPSTREAM_CHUNK(**{name: tensor[:, 30:] for name, tensor in inputs.items()}, initial_state=initial[2:])
    assert packed.shape[1] == 70 and torch.equal(states[1], initial[1])
    torch.testing.assert_close(packed[:, 30:], second, rtol=1e-4, atol=2e-5)


def test_packed_documents_differ_from_upstreams_torch_path_which_ignores_cu_seqlens() -> None:
    """Upstream's torch body carries the state across the boundary (its decorator refuses cu_seqlens on CPU
    instead of calling it, and so does the generated eager path); the kernel keeps the documents apart."""
    inputs, cu_seqlens = _documents([40, 30])
    packed, _ = delta_rule.chunk_gated_delta_rule(**inputs, cu_seqlens=cu_seqlens)
    carried, _ = UPSTREAM_CHUNK(**inputs, cu_seqlens=cu_seqlens)
    torch.testing.assert_close(packed[:, :40], carried[:, :40], rtol=1e-4, atol=2e-5)
    assert not torch.allclose(packed[:, 40:], carried[:, 40:], atol=1e-3)


def test_a_packed_documents_loss_reaches_its_own_inputs_as_alone_and_no_other_documents() -> None:
    inputs, cu_seqlens = _documents([20, 50])
    weights = torch.randn(1, 20, HEADS, V_DIM, generator=torch.Generator().manual_seed(8))
    packed = _with_grad(inputs)
    out, _ = delta_rule.chunk_gated_delta_rule(**packed, use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens)
    (out[:, :20] * weights).sum().backward()
    alone = _with_grad({name: tensor[:, :20] for name, tensor in inputs.items()})
    out_alone, _ = UPSTREAM_CHUNK(**alone, use_qk_l2norm_in_kernel=True)
    (out_alone * weights).sum().backward()
    for name in inputs:
        torch.testing.assert_close(packed[name].grad[:, :20], alone[name].grad, rtol=1e-4, atol=2e-5)
        assert not packed[name].grad[:, 20:].any()


@pytest.mark.parametrize("bounds", [[0, 30, 60], [5, 70], [0, 50, 40, 70]], ids=["short", "not_from_zero", "falling"])
def test_cu_seqlens_that_do_not_cover_the_sequence_are_refused(bounds: list[int]) -> None:
    inputs = _delta_inputs(batch=1)
    with pytest.raises(ValueError, match="cu_seqlens must rise"):
        delta_rule.chunk_gated_delta_rule(**inputs, cu_seqlens=torch.tensor(bounds))


def test_cu_seqlens_with_a_batch_of_more_than_one_is_refused() -> None:
    with pytest.raises(ValueError, match="batch of one"):
        delta_rule.chunk_gated_delta_rule(**_delta_inputs(), cu_seqlens=torch.tensor([0, LENGTH]))


# -- the causal conv1d and the gated RMSNorm ----------------------------------------------------------------
CHANNELS, WIDTH = 6, 4


def _conv_inputs(length: int = 9) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    return (
        torch.randn(2, CHANNELS, length, generator=generator),
        torch.randn(CHANNELS, WIDTH, generator=generator),
        torch.randn(CHANNELS, generator=generator),
    )


@pytest.mark.parametrize("kernel", [delta_rule.causal_conv1d, eager.causal_conv1d], ids=["chunked_delta", "reference"])
@pytest.mark.parametrize("activation", ["silu", None])
def test_causal_conv1d_matches_upstream(kernel: Callable[..., Any], activation: str | None) -> None:
    hidden, weight, bias = _conv_inputs()
    torch.testing.assert_close(
        kernel(hidden, weight, bias, activation), UPSTREAM_CONV(hidden, weight, bias, activation)
    )


def test_causal_conv1d_of_packed_documents_starts_each_from_zeros() -> None:
    hidden, weight, bias = _conv_inputs(12)
    one = hidden[:1]
    packed = delta_rule.causal_conv1d(one, weight, bias, "silu", cu_seqlens=torch.tensor([0, 5, 12]))
    torch.testing.assert_close(packed[..., :5], UPSTREAM_CONV(one[..., :5], weight, bias, "silu"))
    torch.testing.assert_close(packed[..., 5:], UPSTREAM_CONV(one[..., 5:], weight, bias, "silu"))


def test_reference_causal_conv1d_update_matches_upstream_output_and_state() -> None:
    hidden, weight, bias = _conv_inputs(1)
    state = torch.randn(2, CHANNELS, WIDTH, generator=torch.Generator().manual_seed(6))
    ours_state, upstream_state = state.clone(), state.clone()
    out = eager.causal_conv1d_update(hidden, ours_state, weight, bias, "silu")
    want = UPSTREAM_CONV_UPDATE(hidden, upstream_state, weight, bias, "silu")
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(ours_state, upstream_state)
    assert not torch.equal(ours_state, state)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_reference_gated_rms_norm_is_upstreams_module_bit_for_bit(dtype: torch.dtype) -> None:
    norm = upstream.Qwen3_5RMSNormGated(12, eps=1e-5).to(dtype)
    torch.nn.init.normal_(norm.weight)
    generator = torch.Generator().manual_seed(7)
    hidden, gate = (torch.randn(10, 12, generator=generator).to(dtype) for _ in range(2))
    expected = norm(hidden, gate)
    assert torch.equal(eager.rms_norm_gated(hidden, gate, norm.weight, 1e-5, activation="silu"), expected)


# -- the GPU families: named, never loaded on a machine that cannot run them -----------------------------------
def test_importing_the_ops_loads_no_gpu_linear_attention_module() -> None:
    code = (
        "import sys, modelgraft.models.ops as ops\n"
        "names = [ops.KERNEL_FAMILIES[f].module for f in ('fla', 'causal_conv1d')]\n"
        "print(names, sorted(m for m in sys.modules if m in names or m in ('fla', 'causal_conv1d')))\n"
    )
    done = run_code(code, cwd=Path.cwd())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "['modelgraft.models.ops.kernels.fla_delta', 'modelgraft.models.ops.kernels.causal_conv'] []"
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine may run the GPU families")
@pytest.mark.parametrize(("slot", "family"), [("chunk_gated_delta_rule", "fla"), ("causal_conv1d", "causal_conv1d")])
def test_binding_a_gpu_family_here_is_refused_naming_cuda(slot: str, family: str) -> None:
    with pytest.raises(KernelUnavailableError, match="needs a CUDA device"):
        bind_ops(OpsConfig({slot: family}))
    assert not SLOTS[slot].use_non_eager_impl


@pytest.mark.parametrize("slot", ["chunk_gated_delta_rule", "recurrent_gated_delta_rule"])
def test_the_fla_wrappers_hand_fla_one_query_key_head_per_value_head(
    slot: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slots get grouped heads, as upstream's functions do; FLA gets them repeated as upstream repeats them.

    A stand-in ``fla`` records what the wrapper module, loaded under another name, hands it.
    """
    seen: dict[str, torch.Tensor] = {}

    def stand_in(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **kwargs: Any) -> tuple[Any, None]:
        seen.update(query=query, key=key, value=value, **kwargs)
        return value, None

    ops = types.ModuleType("fla.ops.gated_delta_rule")
    ops.chunk_gated_delta_rule = ops.fused_recurrent_gated_delta_rule = stand_in
    for name in ("fla", "fla.ops"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "fla.ops.gated_delta_rule", ops)
    origin = importlib.util.find_spec(KERNEL_FAMILIES["fla"].module).origin
    under_test = importlib.util.spec_from_file_location("fla_under_test", origin)
    wrappers = importlib.util.module_from_spec(under_test)
    under_test.loader.exec_module(wrappers)
    inputs = _delta_inputs(length=3)
    getattr(wrappers, slot)(**inputs, use_qk_l2norm_in_kernel=True)
    query, key = grouped_query_key(inputs["query"], inputs["key"], inputs["value"])
    assert torch.equal(seen["query"], query) and torch.equal(seen["key"], key)
    assert seen["value"] is inputs["value"] and seen["use_qk_l2norm_in_kernel"] is True


# -- the GPU families on a CUDA device: FLA's and causal-conv1d's kernels against upstream's torch bodies -------
#: Each marked ``gpu``; skipped, naming why, without a CUDA device or without the family's package. Tolerances are
#: first choices, to be narrowed to what the first device run measures (docs/performance.md, "GPU"): FLA's Triton
#: kernels run the chunked algorithm in their own order (tensor-wide rtol 1e-3, whatever precision their products
#: take), causal-conv1d's CUDA kernel the same sums as upstream's convolution (elementwise, torch's fp32 defaults).
DEVICE = "cuda"
FLA_TOLERANCE = Tolerance(rtol=1e-3, atol=1e-5, norm_wise=True)


def _family(name: str) -> types.ModuleType:
    """The family's kernel module, or a skip naming why it cannot run here."""
    why = KERNEL_FAMILIES[name].unavailable_reason()
    if why is not None:
        pytest.skip(f"{name} not exercised: {why}")
    return KERNEL_FAMILIES[name].load()


def _on_device(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.to(DEVICE) for name, tensor in tensors.items()}


def _assert_within(actual: list[torch.Tensor], expected: list[torch.Tensor], tolerance: Tolerance) -> None:
    """The output, the final state and any input gradients, in that order, each within ``tolerance``."""
    assert len(actual) == len(expected)
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        assert_within(f"output, final state or gradient [{index}]", want, got, tolerance)


@pytest.mark.gpu
@pytest.mark.parametrize("l2norm", [True, False], ids=["l2norm", "raw_qk"])
def test_fla_chunked_delta_rule_on_the_device_matches_upstream_outputs_state_and_gradients(l2norm: bool) -> None:
    kernels = _family("fla")
    inputs = _on_device(_delta_inputs())
    initial = torch.randn(BATCH, HEADS, K_DIM, V_DIM, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    options = {"use_qk_l2norm_in_kernel": l2norm, "initial_state": initial}
    expected = _run_with_grads(UPSTREAM_CHUNK, inputs, **options)
    _assert_within(_run_with_grads(kernels.chunk_gated_delta_rule, inputs, **options), expected, FLA_TOLERANCE)


@pytest.mark.gpu
def test_fla_recurrent_delta_rule_on_the_device_matches_upstreams_decode_steps() -> None:
    """The decode path (the generated mixer calls it with a cache, under no_grad): outputs and final state."""
    kernels = _family("fla")
    inputs = _on_device(_delta_inputs(length=3))
    initial = torch.randn(BATCH, HEADS, K_DIM, V_DIM, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    options = {"use_qk_l2norm_in_kernel": True, "initial_state": initial, "output_final_state": True}
    with torch.no_grad():
        expected = UPSTREAM_RECURRENT(**inputs, **options)
        actual = kernels.recurrent_gated_delta_rule(**inputs, **options)
    _assert_within(list(actual), list(expected), FLA_TOLERANCE)


@pytest.mark.gpu
def test_fla_packed_documents_on_the_device_give_the_outputs_and_states_each_gives_alone() -> None:
    kernels = _family("fla")
    lengths = [70, 5, 33]
    inputs, cu_seqlens = _documents(lengths)
    inputs, cu_seqlens = _on_device(inputs), cu_seqlens.to(DEVICE)
    initial = torch.randn(len(lengths), HEADS, K_DIM, V_DIM, generator=torch.Generator().manual_seed(4)).to(DEVICE)
    packed, states = kernels.chunk_gated_delta_rule(
        **inputs, initial_state=initial, output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens
    )
    for index, (start, end) in enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist(), strict=True)):
        alone = {name: tensor[:, start:end] for name, tensor in inputs.items()}
        out, state = UPSTREAM_CHUNK(
            **alone, initial_state=initial[index : index + 1], output_final_state=True, use_qk_l2norm_in_kernel=True
        )
        assert_within(f"document {index}", out, packed[:, start:end], FLA_TOLERANCE)
        assert_within(f"state of document {index}", state, states[index : index + 1], FLA_TOLERANCE)


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["silu", None])
def test_causal_conv1d_on_the_device_matches_upstream(activation: str | None) -> None:
    kernels = _family("causal_conv1d")
    hidden, weight, bias = (tensor.to(DEVICE) for tensor in _conv_inputs())
    torch.testing.assert_close(
        kernels.causal_conv1d(hidden, weight, bias, activation), UPSTREAM_CONV(hidden, weight, bias, activation)
    )


@pytest.mark.gpu
def test_causal_conv1d_of_packed_documents_on_the_device_starts_each_from_zeros() -> None:
    kernels = _family("causal_conv1d")
    hidden, weight, bias = (tensor.to(DEVICE) for tensor in _conv_inputs(12))
    one = hidden[:1]
    packed = kernels.causal_conv1d(one, weight, bias, "silu", cu_seqlens=torch.tensor([0, 5, 12], device=DEVICE))
    torch.testing.assert_close(packed[..., :5], UPSTREAM_CONV(one[..., :5], weight, bias, "silu"))
    torch.testing.assert_close(packed[..., 5:], UPSTREAM_CONV(one[..., 5:], weight, bias, "silu"))


@pytest.mark.gpu
def test_causal_conv1d_update_on_the_device_matches_upstreams_output_and_state() -> None:
    kernels = _family("causal_conv1d")
    hidden, weight, bias = (tensor.to(DEVICE) for tensor in _conv_inputs(1))
    state = torch.randn(2, CHANNELS, WIDTH, generator=torch.Generator().manual_seed(6)).to(DEVICE)
    ours_state, upstream_state = state.clone(), state.clone()
    out = kernels.causal_conv1d_update(hidden, ours_state, weight, bias, "silu")
    want = UPSTREAM_CONV_UPDATE(hidden, upstream_state, weight, bias, "silu")
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(ours_state, upstream_state)
