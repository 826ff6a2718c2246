"""Headline figures of a fleet run: fleet-wide and per replica."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import mul

from llmsim.engine.scheduler.simulation_summary import Percentiles


def counted_percentiles(*counts: Mapping[float, int]) -> Percentiles:
    """Percentiles of a multiset given as value -> count (or the union of several such), equal to
    ``Percentiles.of`` of the expanded values.

    A fleet's inter-token gaps are one counter per replica, some 10^5 values each: they are read
    where they are (no merged counter) and put in order by one sort of their positions, so the
    per-value work is C's, not a Python loop's.
    """
    values: list[float] = []
    numbers: list[int] = []
    for c in counts:
        values += c.keys()
        numbers += c.values()
    if not values:
        return Percentiles.of(())
    order = sorted(range(len(values)), key=values.__getitem__)
    ordered = list(map(values.__getitem__, order))
    cumulative = list(accumulate(map(numbers.__getitem__, order)))
    total = cumulative[-1]

    def at(k: int) -> float:
        # The k-th smallest value (0-based): the first value whose cumulative count exceeds k.
        return ordered[bisect_right(cumulative, k)]

    def pct(q: float) -> float:
        pos = (total - 1) * q / 100.0
        lo = math.floor(pos)
        hi = min(lo + 1, total - 1)
        a = at(lo)
        return a + (at(hi) - a) * (pos - lo)

    mean = math.fsum(map(mul, values, numbers)) / total
    return Percentiles(total, mean, pct(50), pct(90), pct(99))


@dataclass(frozen=True, slots=True)
class Latencies:
    """The latency distributions of a set of requests, in seconds."""

    ttft: Percentiles
    # Every gap between two tokens of a request, pooled (vllm bench's ITL).
    itl: Percentiles
    # Per request: (last token - first token) / (tokens - 1), for requests of 2+ tokens (vllm bench's TPOT).
    tpot: Percentiles
    e2e: Percentiles
    queue_time: Percentiles

    @classmethod
    def of(
        cls,
        ttft: Iterable[float],
        itl_gaps: Sequence[Mapping[float, int]],
        tpot: Iterable[float],
        e2e: Iterable[float],
        queue_time: Iterable[float],
    ) -> Latencies:
        return cls(
            Percentiles.of(ttft),
            counted_percentiles(*itl_gaps),
            Percentiles.of(tpot),
            Percentiles.of(e2e),
            Percentiles.of(queue_time),
        )


@dataclass(frozen=True, slots=True)
class ReplicaSummary:
    """One replica's share of the run."""

    name: str
    model: str
    # Requests the router sent here.
    num_requests: int
    num_finished: int
    num_aborted: int
    num_rejected: int
    output_tokens: int
    latencies: Latencies
    num_steps: int
    # Simulated seconds the replica's GPU spent in steps, over the run's duration.
    busy_fraction: float
    mean_batch_size: float
    num_preemptions: int
    kv_total_blocks: int
    kv_peak_used_blocks: int
    # Prompt tokens served from the prefix cache over prompt tokens looked up (vLLM's hits over
    # queries); NaN where nothing was looked up (prefix caching off).
    prefix_hit_rate: float


@dataclass(frozen=True, slots=True)
class FleetSummary:
    """The whole fleet."""

    num_replicas: int
    num_requests: int
    num_finished: int
    num_aborted: int
    num_rejected: int
    # Simulated seconds from the first request sent to the last step's end.
    duration: float
    output_tokens: int
    latencies: Latencies
    num_preemptions: int
    # Max over mean of requests per replica (1.0: perfectly even).
    load_imbalance: float
    prefix_hit_rate: float
    replicas: tuple[ReplicaSummary, ...]

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration if self.duration > 0 else math.nan

    @property
    def requests_per_s(self) -> float:
        return self.num_finished / self.duration if self.duration > 0 else math.nan
