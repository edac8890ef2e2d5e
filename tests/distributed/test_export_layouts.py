"""export_hub_checkpoint in one process: each model type's converter writes its hub layout (gpt_oss's fused
experts as they are, DeepSeek-V4's reference names and per-expert ``w1``/``w3``/``w2``), which upstream's
from_pretrained loads with the model's logits; the transposed layout reads back through the converter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from modelgraft.models.converters.moe import FusedExpertsConverter
from modelgraft.models.distributed.export import INDEX_NAME, export_hub_checkpoint
from modelgraft.models.testing import causal_lm_batch

from .export_scenarios import SHARD_BYTES, upstream_logits
from .scenarios import assert_close, fresh_model
from .sharded_scenarios import model_config


@pytest.mark.parametrize(
    ("name", "hub_key"),
    [("gpt_oss", "model.layers.0.mlp.experts.gate_up_proj_bias"), ("deepseek_v4", "layers.1.ffn.experts.0.w3.weight")],
)
def test_export_writes_the_hub_layout_upstream_loads_with_the_models_logits(
    name: str, hub_key: str, tmp_path: Path
) -> None:
    config = model_config(name)
    model = fresh_model(name, config).eval()
    export_hub_checkpoint(model, None, tmp_path, max_shard_size=SHARD_BYTES)
    assert hub_key in json.loads((tmp_path / INDEX_NAME).read_text())["weight_map"]
    batch = causal_lm_batch(config, batch_size=2)
    with torch.no_grad():
        expected = model(input_ids=batch["input_ids"]).logits
    assert_close(upstream_logits(name, tmp_path, batch), expected, f"{name}: upstream's logits of the export")


def test_transposed_export_stores_experts_in_out_and_reads_back_through_the_converter() -> None:
    sizes = {"num_experts": 3, "hidden_size": 8, "intermediate_size": 5}
    converter = FusedExpertsConverter(**sizes, export_layout="transposed")
    gate_up, down = torch.randn(3, 10, 8), torch.randn(3, 8, 5)
    exported = converter.export("m.experts.gate_up_proj", gate_up) + converter.export("m.experts.down_proj", down)
    assert [(key, tuple(t.shape)) for key, t in exported] == [
        ("m.experts.gate_up_proj", (3, 8, 10)),
        ("m.experts.down_proj", (3, 5, 8)),
    ]
    back = dict(pair for key, tensor in exported for pair in FusedExpertsConverter(**sizes).convert(key, tensor))
    assert torch.equal(back["m.experts.gate_up_proj"], gate_up) and torch.equal(back["m.experts.down_proj"], down)


def test_export_files_stay_within_max_shard_size_and_the_index_totals_their_bytes(tmp_path: Path) -> None:
    model = fresh_model("llama", model_config("llama"))
    files = export_hub_checkpoint(model, None, tmp_path, max_shard_size=SHARD_BYTES)
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    sizes: dict[str, int] = {}
    for key, file in index["weight_map"].items():
        tensor = dict(model.state_dict())[key]
        sizes[file] = sizes.get(file, 0) + tensor.numel() * tensor.element_size()
    assert sorted(sizes) == sorted(f.name for f in files) and len(files) > 2, files
    keys_per_file = {file: sum(f == file for f in index["weight_map"].values()) for file in sizes}
    assert all(size <= SHARD_BYTES or keys_per_file[file] == 1 for file, size in sizes.items()), sizes
    assert index["metadata"]["total_size"] == sum(sizes.values())
