"""Summaries of repeated measurements: the median to judge by, and the spread to judge the noise by."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """Median, extremes and count of one repeated measurement."""

    median: float
    low: float
    high: float
    count: int

    def spread(self, fmt: str = "{:.3f}") -> str:
        """``low-high (n=N)``: the range a reader needs before trusting a median of few runs."""
        return f"{fmt.format(self.low)}-{fmt.format(self.high)} (n={self.count})"


def summarize(values: Sequence[float]) -> Summary:
    """Median (robust to one slow outlier, e.g. a page-cache miss) plus min and max."""
    if not values:
        raise ValueError("no measurements to summarize")
    return Summary(median=statistics.median(values), low=min(values), high=max(values), count=len(values))


def seconds_per_call(call: Callable[[], object], count: int) -> list[float]:
    """Wall seconds of each of ``count`` calls of ``call``, one after the other: the repeats a summary is made of."""
    seconds = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return seconds
