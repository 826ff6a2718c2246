"""A cumulative-bucket histogram without locks, for the single-threaded event loop."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence


class Histogram:
    """Prometheus-style bucket counts: ``observe`` is one bisect and two additions.

    NOTE: no lock. Everything that observes runs on the server's event loop thread, and so does
    the /metrics endpoint that reads; prometheus_client's own Histogram takes a lock per call.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError("bucket bounds must be strictly increasing")
        self.bounds = tuple(float(b) for b in bounds)
        # counts[i]: observations in (bounds[i-1], bounds[i]]; the last slot is (bounds[-1], +Inf).
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # bisect_left puts a value equal to a bound into that bound's bucket: Prometheus' ``le``.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def observe_many(self, values: Iterable[float]) -> None:
        bounds = self.bounds
        counts = self.counts
        total = 0.0
        # Per-token loop (one call per request): locals only.
        for value in values:
            counts[bisect_left(bounds, value)] += 1
            total += value
        self.sum += total

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[int]:
        """Counts of observations <= each bound, then the total (the ``+Inf`` bucket)."""
        out: list[int] = []
        running = 0
        for c in self.counts:
            running += c
            out.append(running)
        return out
