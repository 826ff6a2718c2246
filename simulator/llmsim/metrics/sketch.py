"""Quantiles in bounded memory: a log-bucketed sketch (the DDSketch idea) with 1 % relative error."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable

#: Most buckets a batch of values may span to be counted per bucket rather than per value.
_NARROW_SPAN = 4


class QuantileSketch:
    """Counts per logarithmic bucket, so any quantile is known within ``relative_accuracy``.

    Bucket ``k`` holds values in ``(gamma**(k-1), gamma**k]`` with
    ``gamma = (1 + a) / (1 - a)``; reporting ``2 * gamma**k / (gamma + 1)`` is within ``a`` of every
    value in it. Memory grows with the *range* of the values, not their number: at 1 % between
    1 µs and 1 hour that is at most ``log(3.6e9) / log(gamma)`` ≈ 1,100 buckets per sign.
    Values within ``min_value`` of zero share one zero bucket; negative values (a release that
    beat its deadline) get mirrored buckets. ``max`` and ``min`` are exact.
    """

    __slots__ = ("_gamma", "_inv_log_gamma", "_min_value", "_neg", "_pos", "_zero", "count", "max", "min")

    def __init__(self, relative_accuracy: float = 0.01, min_value: float = 1e-9) -> None:
        if not 0 < relative_accuracy < 1:
            raise ValueError("relative_accuracy must be in (0, 1)")
        self._gamma = (1 + relative_accuracy) / (1 - relative_accuracy)
        self._inv_log_gamma = 1 / math.log(self._gamma)
        self._min_value = min_value
        self._pos: dict[int, int] = {}
        self._neg: dict[int, int] = {}
        self._zero = 0
        self.count = 0
        self.min = math.inf
        self.max = -math.inf

    def add(self, value: float) -> None:
        if value > self._min_value:
            k = math.ceil(math.log(value) * self._inv_log_gamma)
            self._pos[k] = self._pos.get(k, 0) + 1
        elif value < -self._min_value:
            k = math.ceil(math.log(-value) * self._inv_log_gamma)
            self._neg[k] = self._neg.get(k, 0) + 1
        else:
            self._zero += 1
        self.count += 1
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    def add_many(self, values: Iterable[float]) -> None:
        """``add`` for each value; one call per request on the token path, so locals only.

        Values within a few buckets of each other (a request's inter-token gaps: one step
        duration, give or take) are sorted and counted per bucket, with a few bisects on the
        same bucket formula instead of one logarithm per value.
        """
        vals = values if isinstance(values, list) else list(values)
        if len(vals) > _NARROW_SPAN * 4:
            lo, hi = min(vals), max(vals)
            if lo > self._min_value:
                inv = self._inv_log_gamma
                lo_k = math.ceil(math.log(lo) * inv)
                hi_k = math.ceil(math.log(hi) * inv)
                if hi_k - lo_k <= _NARROW_SPAN:
                    self._add_narrow(sorted(vals), lo_k, hi_k)
                    return
        self._add_each(vals)

    def _add_narrow(self, ordered: list[float], lo_k: int, hi_k: int) -> None:
        """Positive sorted values within buckets ``lo_k..hi_k``: counted per bucket."""
        inv = self._inv_log_gamma
        log, ceil = math.log, math.ceil

        def bucket(v: float) -> int:
            return ceil(log(v) * inv)

        pos = self._pos
        start = 0
        for k in range(lo_k, hi_k + 1):
            end = bisect_right(ordered, k, start, key=bucket)
            if end > start:
                pos[k] = pos.get(k, 0) + end - start
            start = end
        self.count += len(ordered)
        if ordered[0] < self.min:
            self.min = ordered[0]
        if ordered[-1] > self.max:
            self.max = ordered[-1]

    def _add_each(self, values: list[float]) -> None:
        pos, neg = self._pos, self._neg
        inv = self._inv_log_gamma
        floor_value = self._min_value
        log, ceil = math.log, math.ceil
        lo, hi = self.min, self.max
        zero = n = 0
        for v in values:
            if v > floor_value:
                k = ceil(log(v) * inv)
                pos[k] = pos.get(k, 0) + 1
            elif v < -floor_value:
                k = ceil(log(-v) * inv)
                neg[k] = neg.get(k, 0) + 1
            else:
                zero += 1
            if v < lo:
                lo = v
            if v > hi:
                hi = v
            n += 1
        self._zero += zero
        self.count += n
        self.min, self.max = lo, hi

    def merge(self, other: QuantileSketch) -> None:
        """Add ``other``'s values (same accuracy): the sketch of both sets (several data-parallel ranks)."""
        if other._gamma != self._gamma or other._min_value != self._min_value:
            raise ValueError("only sketches of the same accuracy merge")
        for mine, theirs in ((self._pos, other._pos), (self._neg, other._neg)):
            for k, n in theirs.items():
                mine[k] = mine.get(k, 0) + n
        self._zero += other._zero
        self.count += other.count
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    @property
    def num_buckets(self) -> int:
        return len(self._pos) + len(self._neg) + (1 if self._zero else 0)

    def quantile(self, q: float) -> float | None:
        """The value at rank ``floor(q * (count - 1))`` within the relative accuracy; None if empty.

        The extremes (q = 0 and q = 1) are exact.
        """
        if not 0 <= q <= 1:
            raise ValueError("q must be in [0, 1]")
        if self.count == 0:
            return None
        if q == 0.0:
            return self.min
        if q == 1.0:
            return self.max
        rank = q * (self.count - 1)
        seen = 0
        # Ascending order: most negative first (largest key of the mirrored side), zero, positives.
        for k in sorted(self._neg, reverse=True):
            seen += self._neg[k]
            if seen > rank:
                return self._clamp(-self._value(k))
        seen += self._zero
        if seen > rank:
            return self._clamp(0.0)
        for k in sorted(self._pos):
            seen += self._pos[k]
            if seen > rank:
                return self._clamp(self._value(k))
        return self.max

    def _value(self, k: int) -> float:
        return 2 * self._gamma**k / (self._gamma + 1)

    def _clamp(self, value: float) -> float:
        return min(max(value, self.min), self.max)
