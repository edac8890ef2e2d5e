"""``compile_layers`` beyond recording: how its compiled code is shared between layers (docs/compile.md, "Compiling a
model per decoder layer")."""

from __future__ import annotations

import torch
from torch import nn
from torch._dynamo.utils import counters

from modelgraft.models.compiling import compile_layers


def _layer_classes(count: int) -> list[type[nn.Module]]:
    """``count`` distinct layer classes, as a VLM's text layers, tower blocks and merger add up to."""

    def forward(self: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden) * self.scale

    def init(self: nn.Module, scale: float) -> None:
        nn.Module.__init__(self)
        self.proj = nn.Linear(4, 4)
        self.scale = scale

    return [type(f"Layer{i}", (nn.Module,), {"__init__": init, "forward": forward}) for i in range(count)]


def test_more_layer_classes_than_dynamos_recompile_limit_each_run_one_compiled_graph() -> None:
    limit = torch._dynamo.config.recompile_limit
    layers = [cls(float(i + 1)) for i, cls in enumerate(_layer_classes(limit + 2))]
    compile_layers(layers, fullgraph=True, backend="eager")
    hidden = torch.randn(2, 4)
    graphs_before = counters["stats"]["unique_graphs"]  # dynamo's counters outlive its reset

    for layer in layers:
        eager = type(layer).forward(layer, hidden)
        torch.testing.assert_close(layer(hidden), eager, rtol=0, atol=0)

    assert counters["stats"]["unique_graphs"] - graphs_before == len(layers)
