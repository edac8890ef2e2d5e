"""The MoE budget's own protocol row: qwen3_moe's step with each configuration in a process of its own, per round.

The figures come from child processes (the smoke run renders the row end to end); what is checked here is how a
row reads them: each round's ratio is upstream's step time over the kernel's in that round, the figure is their
median, judged against the budget, and the notes say whether every round met it.
"""

from __future__ import annotations

from benchmarks import budgets
from benchmarks.moe_bench import UPSTREAM_DEFAULT, process_per_configuration_row
from benchmarks.report import MET, MISSED


def _row(upstream: list[float], kernel: list[float]):
    figures = {UPSTREAM_DEFAULT: upstream, "grouped": kernel, "grouped_compiled": [9.0] * len(kernel)}
    return process_per_configuration_row("qwen3_moe", "grouped", figures, {UPSTREAM_DEFAULT: 5.25, "grouped": 5.5})


def test_each_rounds_ratio_is_upstreams_time_over_the_kernels_and_the_figure_their_median() -> None:
    row = _row(upstream=[4.0, 5.4, 4.2], kernel=[2.0, 4.0, 3.0])  # 2.0, 1.35, 1.4

    assert row.result == "1.40x faster"
    assert "rounds: 2.00, 1.35, 1.40 (every round >= 1.3x: yes)" in row.notes
    assert "first-step loss |diff| 2.5e-01" in row.notes
    assert row.status == MET


def test_a_round_under_the_budget_is_named_even_where_the_median_meets_it() -> None:
    row = _row(upstream=[4.0, 4.0, 4.0], kernel=[2.0, 2.0, 4.0])

    assert row.result == "2.00x faster" and row.status == MET
    assert f"(every round >= {budgets.MOE_SPEEDUP_VS_DEFAULT:g}x: no)" in row.notes


def test_a_median_under_the_budget_and_its_noise_misses_it() -> None:
    row = _row(upstream=[4.0, 4.0, 4.0], kernel=[4.0, 3.5, 3.2])

    assert row.status == MISSED
