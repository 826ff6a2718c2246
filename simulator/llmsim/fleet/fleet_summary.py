"""Headline figures of a fleet run: fleet-wide and per replica."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain

from llmsim.engine.scheduler.percentiles import Percentiles


class OrderedCounts:
    """A multiset given as value -> count, put in value order once: what its percentiles, and
    those of a union with others, are read from.

    A fleet's inter-token gaps are one counter per replica, some 10^4-10^5 distinct values each;
    each replica's summary and the fleet's read the same ordered counts (one sort per counter).
    """

    __slots__ = ("cumulative", "products", "total", "values")

    def __init__(self, counts: Mapping[float, int]) -> None:
        # The values sorted as floats (the sort's own float comparison: no key, no tuple per
        # value), then their counts looked up: a quarter less time than ordering positions by
        # a key and gathering both lists through them.
        values = sorted(counts)
        self._fill(values, [counts[value] for value in values])

    @classmethod
    def of_sorted(cls, values: list[float], counts: list[int]) -> OrderedCounts:
        """``counts[i]`` times ``values[i]`` for every ``i``, the values distinct and ascending
        (what :func:`merged_entries` gives)."""
        ordered = cls({})
        ordered._fill(values, counts)
        return ordered

    def _fill(self, values: list[float], counts: list[int]) -> None:
        # One loop over typed lists: compiled, ``accumulate`` and ``map(mul, ...)`` went
        # through generic iterators (the 16-replica summary 280 -> 322 M instructions).
        cumulative: list[int] = []
        products: list[float] = []
        total = 0
        for i in range(len(values)):
            count = counts[i]
            total += count
            cumulative.append(total)
            products.append(values[i] * count)
        #: Distinct values, ascending, and how many values are at most each.
        self.values: list[float] = values
        self.cumulative: list[int] = cumulative
        self.total: int = total
        #: value x count, for the mean (fsum of all of them is exact whatever their order).
        self.products: list[float] = products

    def count_at_most(self, value: float) -> int:
        i = bisect_right(self.values, value)
        return self.cumulative[i - 1] if i else 0


def merged_entries(values: list[float], counts: list[int]) -> tuple[list[float], list[int]]:
    """(value, count) entries, a value possibly in several, as the distinct values ascending and
    each one's summed count; a value whose counts sum to 0 is left out. Whatever order and split
    the entries came in, the same lists (stepping and jumping count a replica's gaps in
    different entries).

    What a replica counts (``ItlGaps``: about one entry per step; in the bench's 16-replica
    fleet, 120 s of arrivals, 293k entries of which 39 % repeat a value). Positions are ordered
    by value once, then one pass merges equal neighbours: 331 M instructions compiled there,
    against 542 M for filling a value -> count dict as tokens left (250 M) and ordering it
    (292 M). Sorting (value, count) tuples instead cost 2.5x as much.
    """
    distinct: list[float] = []
    sums: list[int] = []
    last = 0.0
    pending = -1  # no value yet
    for i in sorted(range(len(values)), key=values.__getitem__):
        value = values[i]
        if value == last and pending >= 0:
            pending += counts[i]
            continue
        if pending > 0:
            distinct.append(last)
            sums.append(pending)
        last = value
        pending = counts[i]
    if pending > 0:
        distinct.append(last)
        sums.append(pending)
    return distinct, sums


def counted_percentiles(*counts: Mapping[float, int] | OrderedCounts) -> Percentiles:
    """Percentiles of a multiset given as value -> count (or the union of several such), equal to
    ``Percentiles.of`` of the expanded values."""
    parts = [c if isinstance(c, OrderedCounts) else OrderedCounts(c) for c in counts]
    parts = [part for part in parts if part.total]
    if not parts:
        return Percentiles.of(())
    total = sum(part.total for part in parts)
    if len(parts) == 1:
        (only,) = parts

        def at(k: int) -> float:
            # The k-th smallest value (0-based): the first value whose cumulative count exceeds k.
            return only.values[bisect_right(only.cumulative, k)]

    else:
        # Every value of the union, ascending (sorted runs: the sort merges them). The k-th
        # smallest of the union is the first of these with more than k values at most it,
        # found by bisection (a count is one bisection per part), not by ordering all counts.
        merged = sorted(chain.from_iterable(part.values for part in parts))

        def at(k: int) -> float:
            lo = 0
            hi = len(merged) - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if sum(part.count_at_most(merged[mid]) for part in parts) > k:
                    hi = mid
                else:
                    lo = mid + 1
            return merged[lo]

    def pct(q: float) -> float:
        pos = (total - 1) * q / 100.0
        lo = math.floor(pos)
        hi = min(lo + 1, total - 1)
        a = at(lo)
        return a + (at(hi) - a) * (pos - lo)

    mean = math.fsum(chain.from_iterable(part.products for part in parts)) / total
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
        itl_gaps: Sequence[Mapping[float, int] | OrderedCounts],
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
    # The hit rate's terms: prompt tokens served from the prefix caches, and looked up in them.
    prefix_hit_tokens: int = 0
    prefix_query_tokens: int = 0

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration if self.duration > 0 else math.nan

    @property
    def requests_per_s(self) -> float:
        return self.num_finished / self.duration if self.duration > 0 else math.nan
