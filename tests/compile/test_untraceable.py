"""What cannot be traced says so: each reference kernel in ``eager.UNTRACEABLE`` does break the graph, and so does
each kernel a distributed family names in its own ``UNTRACEABLE`` (the EP dispatch's host read).

Every other reference a decoder layer calls traces as one graph (``test_decoder_layers.py``); the ones named
here are written as upstream writes them, host reads included, and a compiled model leaves their slots
unbound or binds a traceable kernel. Upstream's own per-expert loop (``experts_implementation="eager"``,
which the parity suites pin) breaks the graph the same way: a fact of the pinned transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

from modelgraft.models.distributed import expert_parallel
from modelgraft.models.ops.kernels import eager


def _experts_inputs() -> tuple[Callable[..., torch.Tensor], tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(0)
    hidden, index = torch.randn(6, 8, generator=generator), torch.randint(0, 4, (6, 2), generator=generator)
    weights, gate_up, down = torch.rand(6, 2), torch.randn(4, 10, 8), torch.randn(4, 8, 5)
    return (lambda *args: eager.moe_experts(*args, "silu")), (hidden, index, weights, gate_up, down)


def _placeholder_inputs() -> tuple[Callable[..., torch.Tensor], tuple[torch.Tensor, ...]]:
    return eager.placeholder_features, (torch.tensor([[True, False, True]]), torch.randn(2, 4))


#: Dynamo warns when it traces through ``functools.cache`` (``eager.activation_module``, sound here: see test_decoder_layers).
pytestmark = pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")

#: A call of each untraceable reference on small inputs; a slot added to ``eager.UNTRACEABLE`` needs one here.
CALLS: dict[str, Callable[[], tuple[Callable[..., torch.Tensor], tuple[torch.Tensor, ...]]]] = {
    "moe_experts": _experts_inputs,
    "placeholder_features": _placeholder_inputs,
}


@pytest.mark.parametrize("slot", sorted(eager.UNTRACEABLE))
def test_a_reference_declared_untraceable_breaks_the_graph(slot: str) -> None:
    assert slot in CALLS, f"eager.UNTRACEABLE names {slot!r}: add a call of its reference to CALLS"
    kernel, args = CALLS[slot]()
    explanation = torch._dynamo.explain(kernel)(*args)
    assert explanation.break_reasons, f"{slot}'s reference traces as one graph: remove it from eager.UNTRACEABLE"


@pytest.mark.upstream_facts
def test_upstreams_eager_experts_loop_breaks_the_graph() -> None:
    config = Qwen3MoeConfig(hidden_size=8, num_experts=4, moe_intermediate_size=5, experts_implementation="eager")
    experts = Qwen3MoeExperts(config)
    torch.nn.init.normal_(experts.gate_up_proj)
    torch.nn.init.normal_(experts.down_proj)
    _, (hidden, index, weights, _, _) = _experts_inputs()
    explanation = torch._dynamo.explain(experts)(hidden, index, weights)
    assert any("nonzero" in reason.reason for reason in explanation.break_reasons), explanation.break_reasons


def test_the_ep_dispatch_declared_untraceable_breaks_the_graph_at_its_host_read(tmp_path: Path) -> None:
    """On an ep group of one gloo rank, the ``ep_alltoall`` experts kernel runs eagerly as a whole, for the reason
    ``expert_parallel.UNTRACEABLE`` declares (its host read of the routing's sizes): no part of it is compiled."""
    assert set(expert_parallel.UNTRACEABLE) == {"moe_experts"}
    _, (hidden, index, weights, gate_up, down) = _experts_inputs()
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        group = torch.distributed.group.WORLD

        def dispatch(hidden: torch.Tensor, *args: torch.Tensor) -> torch.Tensor:  # as a compiled layer calls it
            return expert_parallel.moe_experts(hidden * 2.0, *args, "silu", group=group) + 1.0

        explanation = torch._dynamo.explain(dispatch)(hidden, index, weights, gate_up, down)
    finally:
        torch.distributed.destroy_process_group()
    reasons = [reason.reason for reason in explanation.break_reasons]
    assert len(reasons) == 1 and expert_parallel.UNTRACEABLE["moe_experts"] in reasons[0], reasons
    assert explanation.graph_count == 2, "the graphs before and after the call, and none inside it"
