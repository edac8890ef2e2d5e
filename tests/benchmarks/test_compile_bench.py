"""The compile benchmark's table rows, from two sides' results, and the models it takes; no compiling.

A run of the section compiles every text model twice from a cold cache (minutes), so it is not in the
suite; these tests check what the parent makes of its children's results and which models it hands them.
"""

from __future__ import annotations

from typing import Any

from benchmarks import budgets
from benchmarks.compile_bench import SMOKE_SIZES, model_rows, refusals
from benchmarks.report import FAILED, INFO, MET, MISSED


def _side(compiled: list[float], *, first: float = 30.0, graphs: int = 1, loss: float = 8.5) -> dict[str, Any]:
    return {
        "eager": [0.1, 0.1],
        "first": first,
        "compiled": compiled,
        "first_loss": loss,
        "graphs": graphs,
        "breaks": 0,
        "attention": "sdpa",
        "experts": None,
    }


def test_the_step_row_is_the_ratio_of_median_compiled_steps_judged_against_the_train_step_budget() -> None:
    slower = 1.2 * (budgets.TRAIN_STEP_RATIO + budgets.TRAIN_STEP_NOISE)
    step, _ = model_rows("m", {"upstream": _side([0.1, 0.2, 0.3]), "generated": _side([0.2 * slower, 9.0, 0.0])})
    assert step.result == f"{slower:.3f}x"
    assert step.status == MISSED
    step, _ = model_rows("m", {"upstream": _side([0.2]), "generated": _side([0.2])})
    assert (step.result, step.status) == ("1.000x", MET)


def test_the_compile_time_is_the_first_compiled_step_less_the_median_step_and_has_no_budget() -> None:
    _, compile_row = model_rows("m", {"upstream": _side([1.0], first=21.0), "generated": _side([2.0], first=32.0)})
    assert (compile_row.result, compile_row.status, compile_row.budget) == ("1.500x", INFO, "")
    assert "upstream 20.0 s, generated 30.0 s" in compile_row.notes


def test_the_step_row_says_when_the_sides_compiled_different_graphs() -> None:
    step, _ = model_rows("m", {"upstream": _side([0.1]), "generated": _side([0.1], graphs=3)})
    assert "graphs / breaks: upstream 1 / 0, generated 3 / 0" in step.notes


def test_a_side_that_failed_gives_one_failed_row_with_its_error() -> None:
    rows = model_rows("m", {"upstream": _side([0.1]), "generated": {"error": "BackendCompilerFailed: boom"}})
    assert [(row.result, row.status) for row in rows] == [("error", FAILED)]
    assert "generated: BackendCompilerFailed: boom" in rows[0].notes


def test_dense_moe_and_hybrid_text_models_are_taken_and_a_vlm_is_refused_with_the_reason() -> None:
    refused = refusals(["llama", "qwen3_moe", "qwen3_5", "qwen2_5_vl"], SMOKE_SIZES)
    assert list(refused) == ["qwen2_5_vl"]
    assert "no causal-LM class for 'qwen2_5_vl'" in refused["qwen2_5_vl"]
