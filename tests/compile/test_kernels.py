"""The CPU kernels compile on their own: the grouped experts as one opaque operator, the chunked loss traced through.

The grouped experts kernel is two custom operators (``modelgraft::grouped_experts_fwd`` / ``_bwd``), so a
traced graph holds one call of the forward operator and none of the host reads it makes inside; the
chunked loss is plain torch and traces as one graph. Both, compiled by inductor (C++ on a CPU: skipped,
saying so, where no C++ compiler is installed), train as they do eagerly: outputs and every gradient
within rtol 1e-5, atol 1e-5 in fp32 (inductor fuses and reorders the code around them).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from modelgraft.models.ops.kernels import chunked_loss, load_kernel

TOKENS, HIDDEN, INTERMEDIATE, EXPERTS, TOP_K, VOCAB = 14, 48, 28, 7, 4, 131
INDUCTOR_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def _inductor_compilers() -> list[str]:
    """The C++ compilers inductor looks for on a CPU: ``$CXX``, else ``g++`` (``torch._inductor.config.cpp.cxx``)."""
    from torch._inductor import config

    cxx = config.cpp.cxx
    return [name for name in (cxx if isinstance(cxx, (list, tuple)) else (cxx,)) if name]


needs_cxx = pytest.mark.skipif(
    not any(shutil.which(name) for name in _inductor_compilers()),
    reason=f"inductor compiles C++ on a CPU, and no {' or '.join(_inductor_compilers())} is installed (set CXX)",
)


@pytest.fixture
def inductor_in_process() -> Iterator[None]:
    """Inductor compiles its C++ in this process: starting its pool of compile workers costs about 17 s on two
    cores, more than the C++ of both inductor tests takes (docs/compile.md, "Running the tests")."""
    from torch._inductor import config

    with config.patch(compile_threads=1):
        yield


def _routing() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(TOKENS, HIDDEN, generator=generator)
    logits = torch.randn(TOKENS, EXPERTS, generator=generator)
    scores, index = torch.topk(logits.softmax(-1), TOP_K, dim=-1)
    index[:, 0] = index[:, 0] % 3  # experts 0-2 get more rows, and some experts may get none
    gate_up = torch.randn(EXPERTS, 2 * INTERMEDIATE, HIDDEN, generator=generator) * 0.2
    down = torch.randn(EXPERTS, HIDDEN, INTERMEDIATE, generator=generator) * 0.2
    return hidden, scores, index, gate_up, down


def _experts(**options: Any) -> Callable[..., torch.Tensor]:
    """Routing weights renormalised, the grouped kernel, a residual: code around the operator for the compiler."""
    grouped = load_kernel("moe_experts", "grouped")

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


def test_dynamo_sees_the_grouped_kernel_as_one_operator_call() -> None:
    graphs: list[torch.fx.GraphModule] = []

    def capture(graph: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        graphs.append(graph)
        return graph.forward

    hidden, scores, index, gate_up, down = _routing()
    torch.compile(_experts(), fullgraph=True, backend=capture)(hidden, scores, index, gate_up, down)
    (graph,) = graphs
    targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
    assert targets.count(torch.ops.modelgraft.grouped_experts_fwd.default) == 1, targets
    assert not [target for target in map(str, targets) if "bincount" in target or "tolist" in target], targets


def test_the_grouped_forward_operator_passes_torch_library_opcheck() -> None:
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
    args = (x, index, weights, gate_up, down, gate_up_bias, down_bias, "gelu", True, True, 0.7, None, None)
    results = torch.library.opcheck(torch.ops.modelgraft.grouped_experts_fwd.default, args)
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
@pytest.mark.usefixtures("inductor_in_process")
def test_the_grouped_kernel_compiled_by_inductor_trains_as_it_does_eagerly() -> None:
    expected = _experts_step(_experts())
    actual = _experts_step(torch.compile(_experts(), fullgraph=True, backend="inductor"))
    for name, got, want in zip(("output", "hidden", "scores", "gate_up", "down"), actual, expected, strict=True):
        torch.testing.assert_close(got, want, **INDUCTOR_TOLERANCE, msg=lambda m, n=name: f"{n}: {m}")


@needs_cxx
@pytest.mark.usefixtures("inductor_in_process")
def test_the_chunked_loss_compiled_by_inductor_trains_as_it_does_eagerly() -> None:
    expected = _loss_step(_loss())
    actual = _loss_step(torch.compile(_loss(), fullgraph=True, backend="inductor"))
    for name, got, want in zip(("loss", "hidden", "weight"), actual, expected, strict=True):
        torch.testing.assert_close(got, want, **INDUCTOR_TOLERANCE, msg=lambda m, n=name: f"{n}: {m}")
