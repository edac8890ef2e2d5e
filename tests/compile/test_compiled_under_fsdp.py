"""Layers compiled by ``compile_layers``, then sharded by FSDP2 (the order torchtitan uses): a dense model's layers are
one graph each (``fullgraph=True``) and train as they do eagerly.

One gloo rank in this process: FSDP's hooks run as on many ranks (all-gather before the layer, reduce-scatter after
its backward), over a world of one.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from modelgraft.models.compiling import compile_layers
from modelgraft.models.distributed import ParallelState, apply_fsdp
from modelgraft.models.loader import build_model
from modelgraft.models.testing.declarations import parity_declaration


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[ParallelState]:
    """A gloo world of one rank."""
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield ParallelState.build(device_type="cpu")
    finally:
        torch.distributed.destroy_process_group()


def _llama() -> nn.Module:
    declaration = parity_declaration("llama")
    torch.manual_seed(0)
    return build_model(declaration.config(num_hidden_layers=2), architecture=declaration.causal_lm)


def _step(model: nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    ids = torch.randint(3, 20, (2, 7), generator=torch.Generator().manual_seed(0))
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    return loss.detach(), {name: getattr(g, "full_tensor", lambda g=g: g)() for name, g in grads.items()}


def test_a_dense_model_sharded_by_fsdp2_trains_its_layers_compiled_whole_as_eagerly(one_rank: ParallelState) -> None:
    model = _llama()
    eager = copy.deepcopy(model)
    compile_layers(model.model.layers, fullgraph=True, backend="aot_eager")
    apply_fsdp(model, one_rank)

    loss, grads = _step(model)
    expected_loss, expected_grads = _step(eager)

    torch.testing.assert_close(loss, expected_loss, rtol=1.3e-6, atol=1e-5)
    assert grads.keys() == expected_grads.keys()
    for name, grad in expected_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1.3e-6, atol=1e-5, msg=name)
