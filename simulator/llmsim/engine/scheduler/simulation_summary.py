"""Percentiles and totals of a virtual-time run."""

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


@dataclass(frozen=True, slots=True)
class SimulationSummary:
    """The headline figures of a run."""

    num_requests: int
    num_finished: int
    num_aborted: int
    # Refused at arrival because the waiting queue was full (max_waiting_requests).
    num_rejected: int
    # Simulated seconds from the first arrival to the end of the last step.
    duration: float
    output_tokens: int
    ttft: Percentiles
    itl: Percentiles
    e2e: Percentiles
    queue_time: Percentiles
    num_preemptions: int
    num_steps: int
    mean_batch_size: float
    kv_total_blocks: int
    kv_peak_used_blocks: int

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration if self.duration > 0 else math.nan

    @property
    def requests_per_s(self) -> float:
        return self.num_finished / self.duration if self.duration > 0 else math.nan
