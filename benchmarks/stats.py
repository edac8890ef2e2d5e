"""Summaries of repeated measurements: the median to judge by, and the spread to judge the noise by."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
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
