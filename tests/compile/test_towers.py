"""Each tower family's block compiles; those whose upstream code reads sizes on the host say where.

Which blocks: the first block of the first tower of each family in package order (``tower_layers.TOWERS``):
Qwen-VL vision (qwen2_5_omni's; the same attention as qwen2_vl's and qwen2_5_vl's), GLM-4V vision, Whisper-like audio
(qwen2_5_omni's; also qwen3_omni_moe's), Qwen3-VL vision (qwen3_5's; also qwen3_5_moe's, qwen3_vl's,
qwen3_vl_moe's and qwen3_omni_moe's), SigLIP (idefics3_vision's tower; also llava_onevision's, siglip's and
paligemma's), CLIP (clip), InternViT (internvl) and Pixtral (mistral_large4's tower; also pixtral's). Every tower of
the zoo has a family (``tower_layers.FAMILY_OF``); one block per family keeps the folder within its time budget
(docs/compile.md, "Tower blocks").

SigLIP, CLIP, InternViT and Pixtral blocks trace as one graph (``torch._dynamo.explain``), with their slots
unbound and with every slot they call on its reference kernel, and compiled by ``torch.compile(block,
fullgraph=True, backend="aot_eager")`` give the eager outputs, input gradient and every parameter's gradient within
``layers.TOLERANCES`` (fp32: rtol 1.3e-6, atol 1e-5; bf16: rtol 1.6e-2, atol 1e-5): each in fp32, the first in bf16.

The Qwen-VL, Qwen3-VL and audio blocks do not: their attention, upstream's code as transformers ships it, splits
the packed sequence into its images (or audio chunks) with ``torch.split(..., lengths.tolist())``, a host read
of the chunk lengths that breaks the graph, and nothing else breaks it, unbound or (on the Qwen-VL block, the one
calling ``rope_vision``, the only tower slot no other family calls) on the reference kernels. Compiled without
``fullgraph``, the Qwen-VL block trains as it does eagerly, within the fp32 tolerances, around its breaks.

A composed VLM asks its tower for hidden states, and its first forward hangs transformers' output-capturing hooks
on the tower's modules; dynamo cannot trace their ``ContextVar.get``, so such a block compiled on its own breaks
there. The whole tower traces as one graph with them: upstream's ``capture_outputs`` switches the hooks to a
plain global while it is being traced. Compiled by ``compile_layers``, which makes the hooks' reads traceable, every
block is one graph in the VLM's own forward.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch._dynamo.backends.debugging import ExplainOutput

from modelgraft.models.compiling import compile_layers
from modelgraft.models.ops import KERNEL_FAMILIES
from modelgraft.models.testing.layer_compile import graph_breaks

from .layers import CPU_FAMILIES, assert_steps_match, training_step
from .tower_layers import (
    FAMILY_OF,
    KERNEL_CASES,
    TOWERS,
    TowerCase,
    bound,
    called_slots,
    fresh_model,
    is_composed,
    recorded,
    zoo_towers,
)

#: Dynamo warns when it traces through ``functools.cache``: the reference kernels look their activation up through
#: one (``eager.activation_module``), which gives the same activation for a name every time, so tracing through it is sound.
pytestmark = pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")

ONE_GRAPH = [case for case in TOWERS if not case.reads_lengths_on_host]
HOST_READS = [case for case in TOWERS if case.reads_lengths_on_host]

#: Every block that traces as one graph, unbound and on its reference kernels.
TRACED = [pytest.param(case, kernels, id=f"{case.id}-{kernels}") for case in ONE_GRAPH for kernels in KERNEL_CASES]
#: Every block that reads its chunk lengths on the host, unbound; the first (Qwen-VL's, the one calling
#: ``rope_vision``, which no other family calls) on its reference kernels too.
BROKEN = [pytest.param(case, "unbound", id=f"{case.id}-unbound") for case in HOST_READS] + [
    pytest.param(HOST_READS[0], "reference", id=f"{HOST_READS[0].id}-reference")
]
#: Every one-graph block compiled in fp32, the first in bf16.
COMPILED = [pytest.param(case, torch.float32, id=f"{case.id}-fp32") for case in ONE_GRAPH] + [
    pytest.param(ONE_GRAPH[0], torch.bfloat16, id=f"{ONE_GRAPH[0].id}-bf16")
]
#: The towers of composed VLMs.
COMPOSED = [pytest.param(case, id=case.id) for case in TOWERS if is_composed(case.package)]
#: Composed VLMs whose whole tower still breaks (mistral_large4's Pixtral tower, in transformers 5.25.0): where
#: upstream slices each image's patch embeddings by its size, read on the host (``Tensor.item()``), and at the
#: output-capturing hooks' ContextVar read. The others' whole towers trace as one graph.
WHOLE_TOWER_BREAKS = frozenset({"mistral_large4"})
WHOLE = [p for p in COMPOSED if p.values[0].package not in WHOLE_TOWER_BREAKS]
WHOLE_BREAKING = [p for p in COMPOSED if p.values[0].package in WHOLE_TOWER_BREAKS]


def _breaks(explanation: ExplainOutput) -> list[str]:
    return [
        f"{reason.reason.splitlines()[0]} at {reason.user_stack[-1].filename}:{reason.user_stack[-1].lineno}"
        if reason.user_stack
        else reason.reason.splitlines()[0]
        for reason in explanation.break_reasons
    ]


def test_every_tower_of_the_zoo_belongs_to_a_family() -> None:
    towers = zoo_towers()
    assert {("qwen2_5_omni", "audio"), ("clip", "vision"), ("internvl", "vision")} <= set(towers)
    assert [tower for tower in towers if tower not in FAMILY_OF] == []


def test_one_tower_of_each_family_is_taken() -> None:
    families = [case.family for case in TOWERS]
    assert sorted(families) == sorted({FAMILY_OF[tower][0] for tower in zoo_towers()})
    assert sorted(families) == [
        "CLIP",
        "GLM-4V vision",
        "InternViT",
        "Pixtral",
        "Qwen-VL vision",
        "Qwen3-VL vision",
        "SigLIP",
        "Whisper-like audio",
    ]


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in TOWERS])
def test_the_block_calls_slots_no_cpu_kernel_family_serves(case: TowerCase) -> None:
    called = called_slots(case)
    assert called, "no slot called: the reference case would bind nothing"
    assert {family for family in CPU_FAMILIES if KERNEL_FAMILIES[family].slots & called} == set()


def test_the_reference_cases_bind_every_slot_a_tower_block_calls() -> None:
    traced = {param.values[0] for param in [*TRACED, *BROKEN] if param.values[1] == "reference"}
    assert set().union(*(called_slots(case) for case in TOWERS)) == set().union(*map(called_slots, traced))


@pytest.mark.parametrize(("case", "kernels"), TRACED)
def test_the_block_traces_as_one_graph(case: TowerCase, kernels: str) -> None:
    block = recorded(case, torch.float32)
    with bound(case, kernels):
        assert graph_breaks(block.block, (block.args, block.kwargs)) == []


@pytest.mark.upstream_facts
@pytest.mark.parametrize(("case", "kernels"), BROKEN)
def test_the_block_breaks_the_graph_only_where_its_attention_reads_the_chunk_lengths(
    case: TowerCase, kernels: str
) -> None:
    block = recorded(case, torch.float32)
    with bound(case, kernels):
        explanation = torch._dynamo.explain(block.block)(*block.args, **block.kwargs)
    lines = [reason.user_stack[-1].line for reason in explanation.break_reasons]
    assert explanation.graph_break_count > 0
    assert {reason.reason.splitlines()[0] for reason in explanation.break_reasons} == {"Data dependent operator"}
    assert all("lengths.tolist()" in line for line in lines), _breaks(explanation)


@pytest.mark.parametrize(("case", "dtype"), COMPILED)
def test_the_block_compiled_as_one_graph_trains_as_it_does_eagerly(case: TowerCase, dtype: torch.dtype) -> None:
    block = recorded(case, dtype)
    expected = training_step(block.block, block.block, block.args, block.kwargs)
    compiled = torch.compile(block.block, fullgraph=True, backend="aot_eager")
    actual = training_step(compiled, block.block, block.args, block.kwargs)
    assert_steps_match(actual, expected, dtype)


def test_the_first_host_reading_block_compiled_around_its_breaks_trains_as_it_does_eagerly() -> None:
    block = recorded(HOST_READS[0], torch.float32)
    expected = training_step(block.block, block.block, block.args, block.kwargs)
    compiled = torch.compile(block.block, backend="aot_eager")
    actual = training_step(compiled, block.block, block.args, block.kwargs)
    assert_steps_match(actual, expected, torch.float32)


@pytest.mark.upstream_facts
@pytest.mark.parametrize("case", COMPOSED)
def test_a_composed_vlms_tower_block_breaks_at_upstreams_output_capturing_hooks(case: TowerCase) -> None:
    block = recorded(case, torch.float32)
    hooks = [hook for module in block.hooked_block.modules() for hook in module._forward_hooks.values()]
    assert "output_capturing_hook" in {hook.__name__ for hook in hooks}
    explanation = torch._dynamo.explain(block.hooked_block)(*block.args, **block.kwargs)
    assert explanation.break_reasons
    assert all("ContextVar" in reason.reason for reason in explanation.break_reasons), _breaks(explanation)


@pytest.mark.parametrize("case", COMPOSED)
def test_a_composed_vlms_tower_blocks_compiled_by_compile_layers_run_one_graph_each_in_the_models_forward(
    case: TowerCase,
) -> None:
    """``compile_layers`` makes the hooks' reads traceable: ``fullgraph=True`` holds in the VLM's own forward, which
    records the tower's hidden states, and the logits are the eager model's."""
    model, batch, blocks = fresh_model(case)
    eager = copy.deepcopy(model)
    compile_layers(blocks, fullgraph=True, backend="eager")
    with torch.no_grad():
        expected, actual = eager(**batch).logits, model(**batch).logits
    torch.testing.assert_close(actual, expected, rtol=1.3e-6, atol=1e-5)


@pytest.mark.parametrize("case", WHOLE)
def test_a_composed_vlms_whole_tower_traces_as_one_graph_with_its_output_capturing_hooks(case: TowerCase) -> None:
    block = recorded(case, torch.float32)
    args, kwargs = block.tower_inputs
    assert graph_breaks(block.tower, (args, kwargs)) == []


@pytest.mark.upstream_facts
@pytest.mark.parametrize("case", WHOLE_BREAKING)
def test_a_pixtral_tower_breaks_whole_only_at_upstreams_size_slicing_and_output_capturing_hooks(
    case: TowerCase,
) -> None:
    block = recorded(case, torch.float32)
    args, kwargs = block.tower_inputs
    explanation = torch._dynamo.explain(block.tower)(*args, **kwargs)
    reasons = [reason.reason for reason in explanation.break_reasons]
    assert any("ContextVar" in reason for reason in reasons), _breaks(explanation)
    assert any("Tensor.item()" in reason for reason in reasons), _breaks(explanation)
    assert all("ContextVar" in reason or "Tensor.item()" in reason for reason in reasons), _breaks(explanation)
