"""A cumulative-bucket histogram without locks, for the single-threaded event loop."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
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
        """``observe`` for each value: one call per request on the token path (its token lags and
        gaps), so the values are sorted once (in C) and counted per bucket they span, a few
        bisects instead of one per value."""
        vals = values if isinstance(values, list) else list(values)
        if not vals:
            return
        total = 0.0
        for value in vals:  # in the given order: the same float sum as observing one by one
            total += value
        self.sum += total
        ordered = sorted(vals)
        bounds = self.bounds
        counts = self.counts
        first = bisect_left(bounds, ordered[0])
        last = bisect_left(bounds, ordered[-1])
        counted = 0
        # One bisect per bucket the values span: the values <= each bound up to the last one's.
        for i in range(first, last):
            upto = bisect_right(ordered, bounds[i], counted)
            counts[i] += upto - counted
            counted = upto
        counts[last] += len(ordered) - counted

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
