"""The compile benchmark's table rows, from its children's results, and the models it takes; no compiling.

A run of the section compiles every model twice from a cold cache (minutes), so it is not in the
suite; these tests check what the parent makes of its children's results and which models it hands them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from benchmarks import budgets, compile_bench, run
from benchmarks.compile_bench import (
    SMOKE_SIZES,
    decoder_layers,
    device_missing,
    model_rows,
    prepare_subject,
    refusals,
)
from benchmarks.report import FAILED, INFO, MET, MISSED
from modelgraft.models.testing import seed_everything
from modelgraft.models.testing.vision_encoder_suite import probed_loss


def _alone(compiled: list[float], *, first: float = 30.0, graphs: int = 1) -> dict[str, Any]:
    return {"first": first, "compiled": compiled, "graphs": graphs, "breaks": 0}


def _pair(upstream: list[float], generated: list[float]) -> dict[str, Any]:
    return {
        "eager": {"upstream": [0.5], "generated": [0.5]},
        "compiled": {"upstream": upstream, "generated": generated},
        "loss_abs_diff": 0.0,
        "attention": "sdpa",
        "experts": None,
    }


def _results(pair: dict[str, Any], **children: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cache = {"upstream": 2, "generated": 2, "shared": 2}
    return {"upstream": _alone([0.1]), "generated": _alone([0.1]), "pair": pair, "cache": cache, **children}


def test_the_step_row_is_the_median_of_the_interleaved_rounds_ratios_judged_against_the_train_step_budget() -> None:
    slower = 1.2 * (budgets.TRAIN_STEP_RATIO + budgets.TRAIN_STEP_NOISE)
    step, _ = model_rows("m", _results(_pair([0.1, 0.2, 0.4], [0.1 * slower, 0.2 * slower, 0.0])))
    assert (step.result, step.spread, step.status) == (f"{slower:.3f}x", f"0.000-{slower:.3f} (n=3)", MISSED)
    step, _ = model_rows("m", _results(_pair([0.2], [0.2])))
    assert (step.result, step.status) == ("1.000x", MET)


def test_the_compile_time_is_each_sides_first_step_less_its_median_step_and_has_no_budget() -> None:
    sides = {"upstream": _alone([1.0], first=21.0), "generated": _alone([2.0], first=32.0)}
    _, compile_row = model_rows("m", _results(_pair([0.1], [0.1]), **sides))
    assert (compile_row.result, compile_row.status, compile_row.budget) == ("1.500x", INFO, "")
    assert "upstream 20.0 s, generated 30.0 s" in compile_row.notes


def test_the_step_row_says_when_the_sides_compiled_different_graphs() -> None:
    step, _ = model_rows("m", _results(_pair([0.1], [0.1]), generated=_alone([0.1], graphs=3)))
    assert "graphs / breaks: upstream 1 / 0, generated 3 / 0" in step.notes


def test_the_step_row_says_whether_the_sides_compiled_the_same_graphs() -> None:
    step, _ = model_rows("m", _results(_pair([0.1], [0.1])))
    assert "the same compiled graphs" in step.notes
    step, _ = model_rows("m", _results(_pair([0.1], [0.1]), cache={"upstream": 2, "generated": 3, "shared": 1}))
    assert "cache keys: 1 shared, 2 upstream, 3 generated" in step.notes


def test_a_child_that_failed_gives_one_failed_row_with_its_error() -> None:
    rows = model_rows("m", _results({"error": "BackendCompilerFailed: boom"}))
    assert [(row.result, row.status) for row in rows] == [("error", FAILED)]
    assert "pair: BackendCompilerFailed: boom" in rows[0].notes


def test_dense_moe_hybrid_models_the_vlm_and_omni_packages_and_the_vision_encoders_are_taken() -> None:
    taken = ["llama", "qwen3_moe", "qwen3_5", "qwen2_5_vl", "llava_onevision", "qwen2_5_omni", "clip_vision_model"]
    assert refusals(taken, SMOKE_SIZES) == {}


def test_a_vlms_text_model_type_alone_is_refused_with_the_reason() -> None:
    assert refusals(["qwen2_5_vl_text"], SMOKE_SIZES) == {
        "qwen2_5_vl_text": "transformers has no causal-LM class for 'qwen2_5_vl_text'"
    }


def test_a_vision_encoder_is_trained_on_its_tests_probed_loss_and_compiled_per_encoder_layer() -> None:
    subject = prepare_subject("clip_vision_model", SMOKE_SIZES)
    seed_everything(0)
    model = subject.upstream(subject.config)
    batch = subject.batch()
    assert set(batch) == {"pixel_values"}
    assert subject.loss(model, batch).item() == probed_loss(model(**batch)).item()
    assert type(decoder_layers(model)[0]).__name__ == "CLIPEncoderLayer"


def test_the_step_row_of_a_declared_model_says_what_it_trained_on() -> None:
    declared = "multimodal head on its tests' tiny config and processor batch"
    step, _ = model_rows("qwen2_5_vl", _results({**_pair([0.1], [0.1]), "declared": declared}))
    assert f"the {declared}" in step.notes
    step, _ = model_rows("llama", _results(_pair([0.1], [0.1])))
    assert "tests' tiny config" not in step.notes


def test_a_device_the_machine_lacks_is_named_and_the_cpu_never_is() -> None:
    assert device_missing("cpu") is None
    assert device_missing("tpu") == "unknown device 'tpu' (cpu or cuda)"
    expected = None if torch.cuda.is_available() else "no CUDA device: torch.cuda.is_available() is False"
    assert device_missing("cuda") == expected


def test_a_device_the_listing_child_lacks_gives_one_failed_row_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_bench, "run_child", lambda *args, **kwargs: {"device": "no CUDA device: why"})
    rows, _ = compile_bench.bench_compile(dataclasses.replace(SMOKE_SIZES, device="cuda"), ["llama"])
    assert [(row.measurement, row.status, row.notes) for row in rows] == [
        ("compiled train step on cuda", FAILED, "no CUDA device: why")
    ]


def test_the_device_option_without_only_compile_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        run.main(["--device", "cuda"])
    assert refused.value.code == 2
    assert "--device cuda applies to the compile section alone: add --only compile" in capsys.readouterr().err
