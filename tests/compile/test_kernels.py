"""The CPU kernels compile on their own: the grouped experts as one opaque operator, the chunked loss traced through.

The grouped experts kernel is two custom operators (``modelgraft::grouped_experts_fwd`` / ``_bwd``), so a
traced graph holds one call of the forward operator and none of the host reads it makes inside; the
chunked loss is plain torch and traces as one graph. Both, compiled by inductor (C++ on a CPU: skipped,
saying so, where no C++ compiler is installed), train as they do eagerly: outputs and every gradient
within rtol 1e-5, atol 1e-5 in fp32 (inductor fuses and reorders the code around them).

``grouped_compiled`` is the same loops behind operators of its own (``modelgraft::grouped_compiled_experts_fwd`` /
``_bwd``), with its backward's gated-unit block compiled by inductor when it first runs. It traces as ``grouped``
does; with inductor, on the gated units of the zoo (qwen3_moe's SiLU, DeepSeek-V4's clamped SwiGLU, gpt_oss's
transposed, interleaved, biased unit; fp32, and bf16 once), one graph serves every segment, and outputs and every
gradient match ``grouped`` within rtol 1e-5, atol 1e-5 (fp32) and the eager reference within the kernels'
tolerances; inside a block compiled by inductor (the nested compile of a user's decoder layer) it trains as it
does eagerly; where inductor finds no C++ compiler, binding it is refused with that reason. The layouts run
eagerly in tests/runtime/test_grouped_experts_layouts.py. Qwen3-MoE's first decoder layer (sparse) with it bound
traces as one graph and, compiled by aot_eager with the inductor compile nested inside, trains as it does eagerly.
These tests sit here with the other inductor tests: the first inductor compile of a process costs about 10 s
more than the next ones when inductor's cache is empty (docs/compile.md, "Running the tests").
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

import pytest
import torch

from modelgraft.models.ops import SLOTS, KernelUnavailableError, OpsConfig, bind_ops, current_ops
from modelgraft.models.ops.kernels import chunked_loss, compiled_experts, cpp_compiler_missing, eager, load_kernel
from modelgraft.models.testing import KERNEL_TOLERANCE

TOKENS, HIDDEN, INTERMEDIATE, EXPERTS, TOP_K, VOCAB = 14, 48, 28, 7, 4, 131
INDUCTOR_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
#: The experts kernels and their forward operators (importing compiled_experts defined both families' operators).
EXPERTS_KERNELS = {
    "grouped": torch.ops.modelgraft.grouped_experts_fwd.default,
    "grouped_compiled": torch.ops.modelgraft.grouped_compiled_experts_fwd.default,
}


def _inductor_compilers() -> list[str]:
    """The C++ compilers inductor looks for on a CPU: ``$CXX``, else ``g++`` (``torch._inductor.config.cpp.cxx``)."""
    from torch._inductor import config

    cxx = config.cpp.cxx
    return [name for name in (cxx if isinstance(cxx, (list, tuple)) else (cxx,)) if name]


needs_cxx = pytest.mark.skipif(
    not any(shutil.which(name) for name in _inductor_compilers()),
    reason=f"inductor compiles C++ on a CPU, and no {' or '.join(_inductor_compilers())} is installed (set CXX)",
)
#: grouped_compiled's own check, the one that refuses to bind it (it runs the compiler inductor would run).
needs_grouped_compiled = pytest.mark.skipif(cpp_compiler_missing() is not None, reason=cpp_compiler_missing() or "")


def _routing() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(TOKENS, HIDDEN, generator=generator)
    logits = torch.randn(TOKENS, EXPERTS, generator=generator)
    scores, index = torch.topk(logits.softmax(-1), TOP_K, dim=-1)
    index[:, 0] = index[:, 0] % 3  # experts 0-2 get more rows, and some experts may get none
    gate_up = torch.randn(EXPERTS, 2 * INTERMEDIATE, HIDDEN, generator=generator) * 0.2
    down = torch.randn(EXPERTS, HIDDEN, INTERMEDIATE, generator=generator) * 0.2
    return hidden, scores, index, gate_up, down


def _experts(kernel: str = "grouped", **options: Any) -> Callable[..., torch.Tensor]:
    """Routing weights renormalised, a grouped kernel, a residual: code around the operator for the compiler."""
    grouped = load_kernel("moe_experts", kernel)

    def block(
        hidden: torch.Tensor, scores: torch.Tensor, index: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor
    ):
        weights = scores / scores.sum(dim=-1, keepdim=True)
        return hidden + grouped(hidden, index, weights, gate_up, down, "silu", **options)

    return block


def _experts_step(block: Callable[..., torch.Tensor]) -> list[torch.Tensor]:
    hidden, scores, index, gate_up, down = _routing()
    leaves = [t.clone().requires_grad_(True) for t in (hidden, scores, gate_up, down)]
    out = block(leaves[0], leaves[1], index, leaves[2], leaves[3])
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return [out.detach(), *(leaf.grad for leaf in leaves)]


def _loss() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A final norm, then the chunked loss with a chunk size that splits the 22 rows raggedly (7, 7, 7, 1)."""
    labels = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(1))
    labels[0, :3] = -100

    def head(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        normed = torch.nn.functional.rms_norm(hidden, (HIDDEN,))
        return chunked_loss.causal_lm_loss(normed, weight, labels, vocab_size=VOCAB, chunk_size=7)[0]

    return head


def _loss_step(head: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(2)
    hidden = torch.randn(2, 11, HIDDEN, generator=generator).requires_grad_(True)
    weight = (torch.randn(VOCAB, HIDDEN, generator=generator) * 0.2).requires_grad_(True)
    loss = head(hidden, weight)
    loss.backward()
    return [loss.detach(), hidden.grad, weight.grad]


@pytest.mark.parametrize("kernel", list(EXPERTS_KERNELS))
def test_dynamo_sees_the_grouped_kernel_as_one_operator_call(kernel: str) -> None:
    graphs: list[torch.fx.GraphModule] = []

    def capture(graph: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        graphs.append(graph)
        return graph.forward

    hidden, scores, index, gate_up, down = _routing()
    moe_experts = {"grouped": load_kernel("moe_experts", "grouped"), "grouped_compiled": compiled_experts.moe_experts}

    def block(*args: torch.Tensor) -> torch.Tensor:  # as _experts, without binding (no C++ compiler needed)
        hidden, scores, index, gate_up, down = args
        return hidden + moe_experts[kernel](
            hidden, index, scores / scores.sum(-1, keepdim=True), gate_up, down, "silu"
        )

    torch.compile(block, fullgraph=True, backend=capture)(hidden, scores, index, gate_up, down)
    (graph,) = graphs
    targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
    assert targets.count(EXPERTS_KERNELS[kernel]) == 1, targets
    assert not [target for target in map(str, targets) if "bincount" in target or "tolist" in target], targets


@pytest.mark.parametrize("kernel", list(EXPERTS_KERNELS))
def test_the_grouped_forward_operator_passes_torch_library_opcheck(kernel: str) -> None:
    """Schema, fake implementation against the real one, autograd registration, and AOT dispatch with dynamic
    shapes, on gpt_oss's layout (transposed, interleaved, biased, clamped) with a recomputed-by-vjp unit."""
    generator = torch.Generator().manual_seed(3)
    hidden, _, index, _, _ = _routing()
    leaves = [
        hidden.requires_grad_(True),
        torch.rand(TOKENS, TOP_K, generator=generator).requires_grad_(True),
        torch.randn(EXPERTS, HIDDEN, 2 * INTERMEDIATE, generator=generator).requires_grad_(True),
        torch.randn(EXPERTS, INTERMEDIATE, HIDDEN, generator=generator).requires_grad_(True),
        torch.randn(EXPERTS, 2 * INTERMEDIATE, generator=generator).requires_grad_(True),
        torch.randn(EXPERTS, HIDDEN, generator=generator).requires_grad_(True),
    ]
    x, weights, gate_up, down, gate_up_bias, down_bias = leaves
    # ..., activation, transposed, interleaved, limit, alpha, activation_first, counts
    args = (x, index, weights, gate_up, down, gate_up_bias, down_bias, "gelu", True, True, 0.7, None, False, None)
    results = torch.library.opcheck(EXPERTS_KERNELS[kernel], args)
    assert set(results.values()) == {"SUCCESS"}, results


def test_the_grouped_kernel_given_host_counts_compiles_and_matches_eager() -> None:
    _, _, index, _, _ = _routing()
    counts = torch.bincount(index.reshape(-1), minlength=EXPERTS).tolist()
    expected = _experts_step(_experts(counts=counts))
    actual = _experts_step(torch.compile(_experts(counts=counts), fullgraph=True, backend="aot_eager"))
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_chunked_loss_traces_as_one_graph() -> None:
    hidden = torch.randn(2, 11, HIDDEN)
    weight = torch.randn(VOCAB, HIDDEN)
    explanation = torch._dynamo.explain(_loss())(hidden, weight)
    assert (explanation.graph_count, explanation.graph_break_count, explanation.break_reasons) == (1, 0, [])


@needs_cxx
@pytest.mark.heavy
@pytest.mark.usefixtures("inductor_in_process")
@pytest.mark.parametrize("kernel", list(EXPERTS_KERNELS))
def test_the_grouped_kernel_compiled_by_inductor_trains_as_it_does_eagerly(kernel: str) -> None:
    # For grouped_compiled a nested compile: the block's graph holds its operators, whose backward runs the unit
    # that inductor compiled (in the eager step first, then from the compiled block).
    expected = _experts_step(_experts(kernel))
    actual = _experts_step(torch.compile(_experts(kernel), fullgraph=True, backend="inductor"))
    for name, got, want in zip(("output", "hidden", "scores", "gate_up", "down"), actual, expected, strict=True):
        torch.testing.assert_close(got, want, **INDUCTOR_TOLERANCE, msg=lambda m, n=name: f"{n}: {m}")


#: The gated units of the zoo, in the layout each model holds them: (layout, interleaved, biases, limit, alpha).
ZOO_UNITS = {
    "qwen3_moe": ("fused", False, False, None, None),
    "deepseek_v4": ("fused", False, False, 1.0, None),
    "gpt_oss": ("transposed", True, True, 1.0, 1.702),
}
#: Each unit compiled once (about 1.2 to 1.7 s of inductor each with its cache empty): SiLU and gpt_oss's in fp32,
#: the clamped one in bf16.
COMPILED_CASES = [
    pytest.param("qwen3_moe", torch.float32, id="qwen3_moe-fp32"),
    pytest.param("gpt_oss", torch.float32, id="gpt_oss-fp32"),
    pytest.param("deepseek_v4", torch.bfloat16, id="deepseek_v4-bf16"),
]


def _layout_step(kernel: Callable[..., torch.Tensor], model: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Output and every gradient (in fp32) of ``kernel`` on ``model``'s expert layout, from a non-uniform loss."""
    layout, interleaved, biases, limit, alpha = ZOO_UNITS[model]
    hidden, scores, index, gate_up, down = _routing()
    generator = torch.Generator().manual_seed(4)
    if layout == "transposed":
        gate_up, down = gate_up.transpose(1, 2).contiguous(), down.transpose(1, 2).contiguous()
    leaves = {"hidden": hidden, "weights": scores, "gate_up": gate_up, "down": down}
    if biases:
        leaves["gate_up_bias"] = torch.randn(EXPERTS, 2 * INTERMEDIATE, generator=generator)
        leaves["down_bias"] = torch.randn(EXPERTS, HIDDEN, generator=generator)
    leaves = {name: value.to(dtype).requires_grad_(True) for name, value in leaves.items()}
    out = kernel(
        leaves["hidden"],
        index,
        leaves["weights"],
        leaves["gate_up"],
        leaves["down"],
        "silu",
        layout=layout,
        interleaved=interleaved,
        gate_up_bias=leaves.get("gate_up_bias"),
        down_bias=leaves.get("down_bias"),
        limit=limit,
        alpha=alpha,
    )
    (out.float() * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return {"output": out.detach().float(), **{name: leaf.grad.float() for name, leaf in leaves.items()}}


@needs_grouped_compiled
@pytest.mark.usefixtures("inductor_in_process")
@pytest.mark.parametrize(("model", "dtype"), COMPILED_CASES)
def test_the_grouped_compiled_kernel_under_inductor_matches_grouped_and_the_reference(
    model: str, dtype: torch.dtype
) -> None:
    counters = torch._dynamo.utils.counters["stats"]
    graphs = counters["unique_graphs"]
    actual = _layout_step(load_kernel("moe_experts", "grouped_compiled"), model, dtype)
    # One graph for every segment of the call, whatever its row count (the unit was compiled and ran).
    assert counters["unique_graphs"] - graphs == 1
    grouped = _layout_step(load_kernel("moe_experts", "grouped"), model, dtype)
    reference = _layout_step(eager.moe_experts, model, dtype)
    for name, got in actual.items():
        if dtype == torch.float32:
            torch.testing.assert_close(got, grouped[name], **INDUCTOR_TOLERANCE, msg=lambda m, n=name: f"{n}: {m}")
            torch.testing.assert_close(
                got, reference[name], rtol=KERNEL_TOLERANCE.rtol, atol=KERNEL_TOLERANCE.atol, msg=lambda m: m
            )
        else:  # inductor computes bf16 in fp32 between loads and stores; eager rounds after every operation
            bound = 2e-2 * reference[name].abs().max()
            assert (got - reference[name]).abs().max() <= bound, name


@pytest.mark.parametrize(("slot", "family"), [("moe_experts", "grouped_compiled"), ("rms_norm", "compiled")])
def test_binding_a_compiled_family_where_inductor_finds_no_cpp_compiler_is_refused_with_the_cause(
    slot: str, family: str
) -> None:
    from torch._inductor import config

    before = current_ops()
    nowhere = config.patch({"cpp.cxx": ("/nonexistent/c++",)})  # where inductor looks, as $CXX would set it
    refused = pytest.raises(KernelUnavailableError, match=r"no C\+\+ compiler was found .*/nonexistent/c\+\+")
    with nowhere, refused:
        bind_ops(OpsConfig({slot: family}))
    assert current_ops() == before


@needs_cxx
@pytest.mark.usefixtures("inductor_in_process")
def test_the_chunked_loss_compiled_by_inductor_trains_as_it_does_eagerly() -> None:
    expected = _loss_step(_loss())
    actual = _loss_step(torch.compile(_loss(), fullgraph=True, backend="inductor"))
    for name, got, want in zip(("loss", "hidden", "weight"), actual, expected, strict=True):
        torch.testing.assert_close(got, want, **INDUCTOR_TOLERANCE, msg=lambda m, n=name: f"{n}: {m}")


@needs_grouped_compiled
@pytest.mark.usefixtures("inductor_in_process")
def test_a_sparse_layer_with_the_compiled_families_traces_as_one_graph_and_trains_compiled() -> None:
    """A user's nested compile: the decoder layer compiled whole, the experts' backward block compiled by inductor
    inside it (in the eager step first, then called from the compiled layer's backward). The ``compiled`` family's
    RMSNorms and rotary embedding run compiled by inductor in the eager step and as their references in the
    traced layer."""
    # Imported here, not with the module: the zoo's layers are built when .layers is first imported, and the kernel
    # tests above must not depend on every model of the zoo building.
    from .layers import LAYERS, assert_steps_match, bound, layer_and_inputs, training_step

    # The MoE category's reference model: its first layer is sparse, and the cheapest MoE layer to compile.
    layer = next(layer for layer in LAYERS if (layer.package, layer.role) == ("qwen3_moe", "first"))
    module, args, kwargs = layer_and_inputs(layer, torch.float32)
    with bound(layer, "grouped_compiled+compiled"):
        assert [SLOTS[slot].bound_kernel_name for slot in ("moe_experts", "rms_norm", "rope")] == [
            "grouped_compiled",
            "compiled",
            "compiled",
        ]
        explanation = torch._dynamo.explain(module)(*args, **kwargs)
        expected = training_step(module, module, args, kwargs)
        actual = training_step(torch.compile(module, fullgraph=True, backend="aot_eager"), module, args, kwargs)
    assert (explanation.graph_break_count, explanation.break_reasons) == (0, [])
    assert_steps_match(actual, expected, torch.float32)


@needs_grouped_compiled
@pytest.mark.usefixtures("inductor_in_process")
@pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")  # as in test_decoder_layers
def test_a_dense_layer_with_the_compiled_family_traces_as_one_graph_and_trains_compiled() -> None:
    """Llama's decoder layer with every slot it calls from the ``compiled`` family (RMSNorm, rotary embedding, gated
    activation): run compiled by inductor in the eager step, traced as their references in the compiled layer."""
    from .layers import LAYERS, assert_steps_match, bound, layer_and_inputs, training_step

    layer = next(layer for layer in LAYERS if (layer.package, layer.role) == ("llama", "first"))
    module, args, kwargs = layer_and_inputs(layer, torch.float32)
    with bound(layer, "compiled"):
        assert {
            slot: SLOTS[slot].bound_kernel_name for slot in ("rms_norm", "rope", "glu_activation")
        } == dict.fromkeys(("rms_norm", "rope", "glu_activation"), "compiled")
        explanation = torch._dynamo.explain(module)(*args, **kwargs)
        expected = training_step(module, module, args, kwargs)
        actual = training_step(torch.compile(module, fullgraph=True, backend="aot_eager"), module, args, kwargs)
    assert (explanation.graph_break_count, explanation.break_reasons) == (0, [])
    assert_steps_match(actual, expected, torch.float32)
