"""export_hub_checkpoint into a folder that already holds a checkpoint: the new weights replace the old ones
entirely, for every loader, and an export that fails leaves the folder as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from modelgraft.models.checkpoint import load_checkpoint
from modelgraft.models.converters import ConversionError
from modelgraft.models.distributed.export import INDEX_NAME, export_hub_checkpoint
from modelgraft.models.testing import causal_lm_batch

from .export_scenarios import SHARD_BYTES, RefusesNorms, upstream_logits
from .scenarios import assert_close, fresh_model
from .sharded_scenarios import model_config


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


def _model(seed: int) -> torch.nn.Module:
    """The tiny llama with weights of its own for each ``seed``."""
    model = fresh_model("llama", model_config("llama")).eval()
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=0.02)
    return model


def test_a_single_file_export_over_a_sharded_one_leaves_no_old_shard_or_index(tmp_path: Path) -> None:
    export_hub_checkpoint(_model(0), None, tmp_path, max_shard_size=SHARD_BYTES)
    assert (tmp_path / INDEX_NAME).is_file()
    files = export_hub_checkpoint(_model(1), None, tmp_path)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    assert files == [tmp_path / "model.safetensors"]


def test_both_loaders_read_the_second_export_of_a_folder(tmp_path: Path) -> None:
    export_hub_checkpoint(_model(0), None, tmp_path, max_shard_size=SHARD_BYTES)
    second = _model(1)
    export_hub_checkpoint(second, None, tmp_path)  # one file: an index left behind would name the old shards
    config = model_config("llama")
    batch = causal_lm_batch(config, batch_size=2)
    with torch.no_grad():
        expected = second(input_ids=batch["input_ids"]).logits
    assert_close(upstream_logits("llama", tmp_path, batch), expected, "upstream's logits of the second export")
    reloaded = _model(2)
    load_checkpoint(reloaded, tmp_path)
    with torch.no_grad():
        assert_close(reloaded(input_ids=batch["input_ids"]).logits, expected, "load_checkpoint of the second export")


def test_a_failed_export_leaves_the_previous_one_byte_for_byte(tmp_path: Path) -> None:
    export_hub_checkpoint(_model(0), None, tmp_path, max_shard_size=SHARD_BYTES)
    before = _contents(tmp_path)
    with pytest.raises(ConversionError, match="refused"):
        # Small files: some are written before the converter refuses the last entry.
        export_hub_checkpoint(_model(1), None, tmp_path, converter=RefusesNorms(), max_shard_size=SHARD_BYTES)
    assert _contents(tmp_path) == before


def test_a_failed_export_into_a_new_folder_leaves_no_folder(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="refused"):
        export_hub_checkpoint(_model(0), None, tmp_path / "out", converter=RefusesNorms())
    assert not (tmp_path / "out").exists()


def test_files_that_are_not_weights_stay_in_the_folder(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    export_hub_checkpoint(_model(0), None, tmp_path)
    export_hub_checkpoint(_model(1), None, tmp_path)
    assert (tmp_path / "tokenizer.json").read_text() == "{}"
