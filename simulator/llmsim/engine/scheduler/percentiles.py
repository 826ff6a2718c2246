"""Latency percentiles as reports give them (interpolated as numpy does by default)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of already sorted values, interpolating linearly (numpy's default)."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class Percentiles:
    """p50/p90/p99 and mean of one latency, in seconds (NaN when there are no values)."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Percentiles:
        ordered = sorted(values)
        mean = math.fsum(ordered) / len(ordered) if ordered else math.nan
        return cls(len(ordered), mean, percentile(ordered, 50), percentile(ordered, 90), percentile(ordered, 99))
