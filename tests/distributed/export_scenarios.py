"""A sharded run exported with ``export_hub_checkpoint``, loaded back by upstream transformers' ``from_pretrained``.

Module-level scenarios (spawned by name). Each rank trains the sharded model one AdamW step (so the weights
are no longer the seed's), exports it, and then loads the folder with the upstream class: its logits on the
rank's rows must equal the sharded model's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from modelgraft.models.converters import ConversionError
from modelgraft.models.distributed import (
    ParallelState,
    PeerFailedError,
    apply_expert_parallel,
    apply_fsdp,
    attach_parallel,
)
from modelgraft.models.distributed.export import INDEX_NAME, export_hub_checkpoint
from modelgraft.models.testing import causal_lm_batch

from .scenarios import GROUPED, MODELS, assert_close, fresh_model, rows_of
from .sharded_scenarios import model_config

#: Small files, so the export needs several and an index.
SHARD_BYTES = 64 * 1024


def upstream_logits(name: str, folder: Path, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits of upstream's class loaded from ``folder`` by ``from_pretrained``, refusing any key problem."""
    upstream_cls = getattr(transformers, MODELS[name][1])
    model, info = upstream_cls.from_pretrained(folder, output_loading_info=True)
    problems = {kind: keys for kind, keys in info.items() if keys}
    assert not problems, f"upstream's from_pretrained of the export of {name}: {problems}"
    assert type(model).__module__.startswith("transformers."), type(model).__module__
    with torch.no_grad():
        return model.eval()(input_ids=batch["input_ids"]).logits


def _trained_sharded(name: str, state: ParallelState, batch: dict[str, torch.Tensor]) -> torch.nn.Module:
    model = fresh_model(name, model_config(name))
    if state.ep > 1:
        apply_expert_parallel(model, state)
    attach_parallel(model, state, GROUPED)
    apply_fsdp(model, state)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(**rows_of(batch, state.rank, state.world_size)).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return model


class RefusesNorms:
    """A converter whose way back refuses the final norm: the writer fails in the middle of the export."""

    def export(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        if key == "model.norm.weight":
            raise ConversionError(f"{key}: refused")
        return [(key, tensor)]


def _exported_matches(
    name: str, state: ParallelState, folder: Path, expected_keys: dict[str, bool]
) -> torch.nn.Module:
    batch = causal_lm_batch(model_config(name), batch_size=2 * state.world_size)
    model = _trained_sharded(name, state, batch)
    files = export_hub_checkpoint(model, state, folder, max_shard_size=SHARD_BYTES)
    assert len(files) > 1 and all(f.exists() for f in files), files
    weight_map: dict[str, Any] = json.loads((folder / INDEX_NAME).read_text())["weight_map"]
    for key, present in expected_keys.items():
        assert (key in weight_map) == present, f"{name}: {key} {'missing from' if present else 'in'} the export"
    rows = rows_of(batch, state.rank, state.world_size)
    with torch.no_grad():
        logits = model.eval()(input_ids=rows["input_ids"]).logits
    assert_close(upstream_logits(name, folder, rows), logits, f"{name}: upstream's logits of the export")
    return model


def export_fsdp_x_ep_and_dense(folder: Path) -> None:
    """2 ranks: qwen3_moe under EP=2 x FSDP (per-expert hub keys), llama with tied embeddings under FSDP."""
    _exported_matches(
        "qwen3_moe",
        ParallelState.build(ep=2),
        folder / "qwen3_moe",
        {
            "model.layers.0.mlp.experts.7.gate_proj.weight": True,
            "model.layers.0.mlp.experts.7.down_proj.weight": True,
            "model.layers.0.mlp.experts.gate_up_proj": False,
        },
    )
    state = ParallelState.build()
    llama = _exported_matches(
        "llama", state, folder / "llama", {"model.embed_tokens.weight": True, "lm_head.weight": False}
    )
    # The writer's error reaches the other rank as an error, after it joined every gather: no rank hangs.
    expected = ConversionError if state.rank == 0 else PeerFailedError
    with pytest.raises(expected, match="model.norm.weight: refused"):
        export_hub_checkpoint(llama, state, folder / "refused", converter=RefusesNorms())
    torch.distributed.barrier()  # the next collective still runs
