"""The lock-free bucket histogram and vLLM's bucket sets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmsim.metrics.buckets import build_1_2_5_buckets
from llmsim.metrics.histogram import Histogram


def test_value_on_a_bound_falls_in_that_bound_le_semantics() -> None:
    h = Histogram([1, 2, 5])
    for v in (0.5, 1, 1.5, 2, 5, 5.5, -3):
        h.observe(v)
    # (-inf,1]: 0.5, 1, -3 | (1,2]: 1.5, 2 | (2,5]: 5 | (5,+inf): 5.5
    assert h.counts == [3, 2, 1, 1]
    assert h.cumulative() == [3, 5, 6, 7]
    assert h.count == 7
    assert h.sum == pytest.approx(0.5 + 1 + 1.5 + 2 + 5 + 5.5 - 3)


def test_observe_many_equals_observe_one_by_one() -> None:
    values = [0.001 * i for i in range(500)]
    one, many = Histogram([0.01, 0.1, 0.25]), Histogram([0.01, 0.1, 0.25])
    for v in values:
        one.observe(v)
    many.observe_many(values)
    assert one.counts == many.counts
    # 0..0.01 -> 11 values (0.000..0.010), up to 0.1 -> 90 more, up to 0.25 -> 150, rest 249.
    assert many.counts == [11, 90, 150, 249]
    assert many.sum == pytest.approx(sum(values))


@pytest.mark.parametrize("bounds", [[1, 1, 2], [2, 1], [0.5, 0.25]])
def test_bounds_must_increase(bounds: list[float]) -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        Histogram(bounds)


def test_1_2_5_buckets_stop_at_the_context_length() -> None:
    assert build_1_2_5_buckets(100) == (1, 2, 5, 10, 20, 50, 100)
    assert build_1_2_5_buckets(32768) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)
    assert build_1_2_5_buckets(4) == (1, 2)


@given(
    values=st.lists(
        st.floats(min_value=-1.0, max_value=100.0, allow_nan=False) | st.sampled_from([0.0001, 0.5, 1.0, 5.0]),
        max_size=80,
    )
)
def test_observe_many_in_any_order_counts_as_one_by_one(values: list[float]) -> None:
    bounds = (0.0001, 0.00025, 0.5, 1.0, 5.0)
    one, many = Histogram(bounds), Histogram(bounds)
    for v in values:
        one.observe(v)
    many.observe_many(iter(values))
    assert many.counts == one.counts
    assert many.sum == one.sum  # the same additions in the same order
