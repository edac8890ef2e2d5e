"""load_expert_parallel_checkpoint cuts fused expert tensors on the experts dim and leaves the stored layout
to the converter (declared, or told from the config's sizes), never to the tensor's shape alone.

One process plays ep rank 1 of 2 with a stand-in state, as in ``test_ep_checkpoint.py``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from modelgraft.models.converters import ConversionError
from modelgraft.models.converters.moe import FusedExpertsConverter
from modelgraft.models.distributed import apply_expert_parallel, load_expert_parallel_checkpoint

from . import checkpoint_scenarios as cs


@pytest.fixture(scope="module")
def transposed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cs.write_checkpoints(tmp_path_factory.mktemp("layouts"))["transposed"]


def _rank_1_of_2() -> torch.nn.Module:
    model = cs.build(2)
    apply_expert_parallel(model, SimpleNamespace(ep=2, ep_rank=1))
    return model


def _converter(model: torch.nn.Module, layout: str | None) -> FusedExpertsConverter:
    config = model.config
    return FusedExpertsConverter(
        num_experts=config.num_experts,
        hidden_size=config.hidden_size,
        intermediate_size=config.moe_intermediate_size,
        layout=layout,
    )


def test_a_transposed_checkpoint_declared_fused_is_refused_by_the_converter(transposed: Path) -> None:
    model = _rank_1_of_2()
    with pytest.raises(
        ConversionError,
        match=r"ep rank 1 of 2, experts 4-7: .*experts\.\w+_proj' has shape \[4, \d+, \d+\]; the checkpoint is declared 'fused'",
    ):
        load_expert_parallel_checkpoint(model, transposed, converter=_converter(model, "fused"))


def test_a_transposed_checkpoint_declared_transposed_loads_this_ranks_experts(transposed: Path) -> None:
    model = _rank_1_of_2()
    reference = cs.build(0)
    load_expert_parallel_checkpoint(model, transposed, converter=_converter(model, "transposed"))
    cs.assert_local_experts(model, reference, range(4, 8))
