"""Percentiles of counted values equal those of the expanded list."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from llmsim.engine.scheduler import Percentiles
from llmsim.fleet import counted_percentiles


@given(st.dictionaries(st.floats(0, 10, allow_nan=False), st.integers(1, 5), max_size=30))
def test_counted_percentiles_match_the_expanded_values(counts: dict[float, int]) -> None:
    expanded = [v for v, c in counts.items() for _ in range(c)]
    got = counted_percentiles(Counter(counts))
    if not expanded:
        assert got.count == 0
        return
    want = Percentiles.of(expanded)
    assert (got.count, got.p50, got.p90, got.p99) == (want.count, want.p50, want.p90, want.p99)
    assert abs(got.mean - want.mean) <= 1e-12 * max(1.0, abs(want.mean))
