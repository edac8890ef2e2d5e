"""The conversion tables are those of the transformers tree being read, never the installed one's.

A pin-bump survey reads an old and a new tree in one process: the per-expert projection names of each
version's MoE models must come from that version's ``conversion_mapping.py``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from modelgraft.generator import inspect_cli
from modelgraft.generator.upstream.read_conversion import expert_conversion, transposes_fused_experts
from modelgraft.generator.upstream.reader import read_model

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts

INSTALLED = Path(next(iter(importlib.util.find_spec("transformers").submodule_search_locations)))


def conversion_mapping(gate: str, up: str, down: str) -> str:
    """A conversion_mapping.py whose qwen2_moe entry fuses experts named gate, up and down."""
    return f"""
_MODEL_TO_CONVERSION_PATTERN = {{"qwen3_moe": "qwen2_moe"}}

def _build_checkpoint_conversion_mapping():
    return {{
        "qwen2_moe": [
            WeightConverter(
                source_patterns=[".experts.*.{gate}.weight", ".experts.*.{up}.weight"],
                target_patterns=".experts.gate_up_proj",
                operations=[MergeModulelist(dim=0), Concatenate(dim=1)],
            ),
            WeightConverter(
                source_patterns=[".experts.*.{down}.weight"],
                target_patterns=".experts.down_proj",
                operations=[MergeModulelist(dim=0)],
            ),
        ],
    }}
"""


def tree(folder: Path, mapping: str) -> Path:
    """A transformers tree at ``folder``: the installed package's files, linked, with ``mapping`` of its own."""
    package = folder / "transformers"
    package.mkdir(parents=True)
    for entry in INSTALLED.iterdir():
        if entry.name != "conversion_mapping.py":
            (package / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    (package / "conversion_mapping.py").write_text(mapping, encoding="utf-8")
    return folder


def test_each_tree_gives_the_projection_names_of_its_own_mapping(tmp_path: Path) -> None:
    old = tree(tmp_path / "old", conversion_mapping("w1", "w3", "w2"))
    new = tree(tmp_path / "new", conversion_mapping("gate_proj", "up_proj", "down_proj"))

    first = expert_conversion("qwen3_moe", root=old)
    second = expert_conversion("qwen3_moe", root=new)

    assert first is not None and (first.entry, first.gate, first.up, first.down) == ("qwen2_moe", "w1", "w3", "w2")
    assert second is not None and (second.gate, second.up, second.down) == ("gate_proj", "up_proj", "down_proj")


def test_a_tree_without_the_entry_fuses_nothing_even_where_the_installed_one_does(tmp_path: Path) -> None:
    empty = tree(tmp_path / "empty", "_MODEL_TO_CONVERSION_PATTERN = {}\n")

    assert expert_conversion("mixtral") is not None
    assert expert_conversion("mixtral", root=empty) is None


def test_a_tree_without_conversion_tables_converts_nothing(tmp_path: Path) -> None:
    """A release before conversion_mapping.py (or a toy tree) fuses and transposes nothing on load."""
    (tmp_path / "transformers").mkdir()

    assert expert_conversion("mixtral", root=tmp_path) is None
    assert not transposes_fused_experts("qwen3_vl_moe", root=tmp_path)
    assert transposes_fused_experts("qwen3_vl_moe")


def test_the_reader_of_a_tree_records_that_trees_projection_names(tmp_path: Path) -> None:
    renamed = tree(tmp_path / "renamed", conversion_mapping("wg", "wu", "wd"))

    installed = read_model("qwen2_moe").moe
    from_tree = read_model("qwen2_moe", root=renamed).moe

    assert installed is not None and installed.hub_projections == ("gate_proj", "up_proj", "down_proj")
    assert from_tree is not None and from_tree.hub_projections == ("wg", "wu", "wd")


def test_inspect_of_a_tree_prints_that_trees_hub_weight_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    renamed = tree(tmp_path / "renamed", conversion_mapping("wg", "wu", "wd"))

    assert inspect_cli.main(["qwen2_moe", "--root", str(renamed)]) == 0

    assert "  hub weights    conversion=qwen2_moe gate/up/down=wg/wu/wd" in capsys.readouterr().out.splitlines()
