"""``patchgen-inspect``: report, JSON and exit codes."""

from __future__ import annotations

import json

import pytest

from modelgraft.generator import inspect_cli

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts


def test_report_names_category_and_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    assert inspect_cli.main(["qwen3"]) == 0
    out = capsys.readouterr().out
    assert "dense" in out and "rms_weight" in out and "gated" in out


def test_json_output_parses_to_the_structure(capsys: pytest.CaptureFixture[str]) -> None:
    assert inspect_cli.main(["qwen3_moe", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["category"] == "moe" and data["moe"]["router"]["kind"] == "softmax_topk"


def test_unknown_model_exits_2_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert inspect_cli.main(["no_such_model"]) == 2
    assert "no_such_model" in capsys.readouterr().err


def test_reader_bug_exits_3_with_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(model: str, *, root=None):
        raise RuntimeError("boom")

    monkeypatch.setattr(inspect_cli, "read_model", broken)
    assert inspect_cli.main(["llama"]) == 3
    assert "Traceback" in capsys.readouterr().err


def test_report_of_a_gated_deltanet_hybrid_names_its_mixer_and_the_functions_it_calls(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert inspect_cli.main(["olmo_hybrid"]) == 0
    out = capsys.readouterr().out
    assert "gated deltanet   OlmoHybridGatedDeltaNet" in out and "torch_chunk_gated_delta_rule" in out


def test_report_of_a_short_convolution_hybrid_names_its_mixer_and_the_convs_it_reaches(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert inspect_cli.main(["lfm2"]) == 0
    out = capsys.readouterr().out
    assert "short conv       Lfm2ShortConv" in out
    assert "causal_conv1d_fn / decode step causal_conv1d_update  (through causal_conv1d_forward)  packed=True" in out
