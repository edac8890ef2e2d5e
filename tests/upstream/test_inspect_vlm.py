"""``patchgen-inspect`` on VLMs: the VLM section of the report and of its JSON."""

from __future__ import annotations

import json

import pytest

from modelgraft.generator import inspect_cli

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts


def test_qwen2_vl_report_names_towers_methods_processors_and_both_ropes(capsys: pytest.CaptureFixture[str]) -> None:
    assert inspect_cli.main(["qwen2_vl"]) == 0
    out = capsys.readouterr().out
    # The pinned transformers' rotary embedding sections the positions: the text attention's RoPE is the plain one.
    assert "rope             function apply_rotary_pos_emb (line " in out and "formulation=rotate_half" in out
    assert "vision rope          apply_rotary_pos_emb_vision" in out
    assert "self.visual = Qwen2VisionTransformerPretrainedModel._from_config(...)" in out
    assert "Qwen2VisionTransformerPretrainedModel.merger = PatchMerger (in the tower)" in out
    assert "required=('input_ids', 'mm_token_type_ids')" in out
    assert "returns 2 mask(s)" in out
    assert "Qwen2VLImageProcessorPil" in out
    assert "fits the Qwen-VL contract" in out


def test_qwen3_vl_report_shows_the_composition_and_deepstack_mergers(capsys: pytest.CaptureFixture[str]) -> None:
    assert inspect_cli.main(["qwen3_vl"]) == 0
    out = capsys.readouterr().out
    assert "Qwen3VLModel.visual = AutoModel.from_config(config.vision_config) -> Qwen3VLVisionConfig" in out
    assert "deepstack mergers" in out


def test_llava_report_lists_what_differs_from_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert inspect_cli.main(["llava"]) == 0
    out = capsys.readouterr().out
    assert "differs from the Qwen-VL contract:" in out
    assert "    - LlavaModel has no get_rope_index (no multimodal position ids)" in out
    assert "chosen by the checkpoint's config" in out


def test_llava_report_says_it_fits_the_composed_contract_its_structure_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert inspect_cli.main(["llava"]) == 0
    assert "fits the composed-VLM contract (the one its structure shows)" in capsys.readouterr().out


def test_a_composed_report_lists_each_difference(capsys: pytest.CaptureFixture[str]) -> None:
    assert inspect_cli.main(["ovis2_5"]) == 0
    out = capsys.readouterr().out
    assert "differs from the composed-VLM contract (the one its structure shows):" in out
    assert "    - Ovis2_5Model.forward leaves get_placeholder_mask to another method" in out


def test_json_holds_the_vlm_part(capsys: pytest.CaptureFixture[str]) -> None:
    assert inspect_cli.main(["qwen3_vl_moe", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["vlm"]["vision"]["attr"] == "visual"
    assert data["vlm"]["rope_index"]["required"] == ["input_ids", "mm_token_type_ids"]
    assert data["vlm"]["contract_differences"] == []


def test_a_text_model_report_has_no_vlm_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert inspect_cli.main(["qwen3"]) == 0
    assert "vlm              " not in capsys.readouterr().out


def test_a_vlm_without_processors_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert inspect_cli.main(["glm_ocr"]) == 0
    assert "processors           none: neither the package nor the Auto tables name one" in capsys.readouterr().out
