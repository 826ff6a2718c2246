"""The quantile sketch behind /metrics/summary: accuracy against exact quantiles, bounded memory."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsim.metrics.sketch import QuantileSketch

QS = (0.0, 0.01, 0.1, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0)


def exact(values: list[float], q: float) -> float:
    """The lower quantile the sketch promises: the value at rank floor(q * (n - 1))."""
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


def assert_within(sketch: QuantileSketch, values: list[float], accuracy: float) -> None:
    for q in QS:
        got = sketch.quantile(q)
        want = exact(values, q)
        assert got is not None
        assert abs(got - want) <= accuracy * abs(want) + 1e-12, (q, got, want)


def test_lognormal_latencies_within_one_percent() -> None:
    rng = random.Random(42)
    # Latency-like: median 20 ms, a long tail to seconds.
    values = [rng.lognormvariate(math.log(0.020), 1.0) for _ in range(100_000)]
    sketch = QuantileSketch(0.01)
    for v in values:
        sketch.add(v)
    assert sketch.count == len(values)
    assert_within(sketch, values, 0.01)
    assert sketch.max == max(values)
    assert sketch.min == min(values)


def test_known_data_hand_checked() -> None:
    # 1..100 ms: p50 is the value at rank floor(0.5 * 99) = 49, i.e. 50 ms; p99 rank 98 -> 99 ms.
    sketch = QuantileSketch(0.01)
    for i in range(1, 101):
        sketch.add(i / 1000)
    p50, p99 = sketch.quantile(0.5), sketch.quantile(0.99)
    assert p50 == pytest.approx(0.050, rel=0.01)
    assert p99 == pytest.approx(0.099, rel=0.01)
    assert sketch.quantile(1.0) == 0.1


def test_negative_zero_and_positive_values_keep_their_order() -> None:
    # Lags: a few releases a hair early (negative), many exactly on time, some late.
    values = [-0.002] * 10 + [0.0] * 50 + [0.001 * i for i in range(1, 41)]
    sketch = QuantileSketch(0.01)
    for v in values:
        sketch.add(v)
    assert_within(sketch, values, 0.01)
    assert sketch.quantile(0.0) == pytest.approx(-0.002, rel=0.01)
    assert sketch.quantile(0.3) == 0.0


def test_memory_is_bounded_by_the_range_not_the_count() -> None:
    rng = random.Random(7)
    accuracy = 0.01
    gamma = (1 + accuracy) / (1 - accuracy)
    sketch = QuantileSketch(accuracy)
    # Twelve decades: 1 µs .. 1e6 s.
    limit = math.ceil(math.log(1e6 / 1e-6) / math.log(gamma)) + 1
    for _ in range(200_000):
        sketch.add(10 ** rng.uniform(-6, 6))
    after_200k = sketch.num_buckets
    for _ in range(200_000):
        sketch.add(10 ** rng.uniform(-6, 6))
    assert after_200k <= sketch.num_buckets <= limit
    assert limit < 1400  # ≈ 12 * ln(10) / ln(gamma)


def test_empty_sketch_has_no_quantiles() -> None:
    sketch = QuantileSketch()
    assert sketch.quantile(0.5) is None
    with pytest.raises(ValueError, match="q must be"):
        sketch.quantile(1.5)
    with pytest.raises(ValueError, match="relative_accuracy"):
        QuantileSketch(0.0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(min_value=-1e4, max_value=1e4, allow_nan=False), min_size=1, max_size=300), st.sampled_from(QS)
)
def test_any_data_any_quantile(values: list[float], q: float) -> None:
    sketch = QuantileSketch(0.01)
    for v in values:
        sketch.add(v)
    got = sketch.quantile(q)
    want = exact(values, q)
    assert got is not None
    # Values within 1e-9 of zero share the zero bucket: an absolute error of at most 1e-9 there.
    assert abs(got - want) <= 0.01 * abs(want) + 1e-9


def test_add_many_is_add_one_by_one() -> None:
    rng = random.Random(3)
    values = [rng.uniform(-1, 1) ** 3 for _ in range(5000)] + [0.0] * 10
    one, many = QuantileSketch(), QuantileSketch()
    for v in values:
        one.add(v)
    many.add_many(values)
    assert (many.count, many.min, many.max, many.num_buckets) == (one.count, one.min, one.max, one.num_buckets)
    assert [many.quantile(q) for q in QS] == [one.quantile(q) for q in QS]


@given(
    center=st.floats(min_value=1e-6, max_value=10.0),
    spread=st.lists(st.floats(min_value=-0.04, max_value=0.04), min_size=17, max_size=80),
    on_bounds=st.lists(st.integers(-2, 2), max_size=5),
)
def test_add_many_of_close_values_is_add_one_by_one(center: float, spread: list[float], on_bounds: list[int]) -> None:
    """A request's inter-token gaps: all within a few buckets, counted per bucket; the same counts
    as adding each (values right on a bucket's bound included)."""
    gamma = 1.01 / 0.99
    k = math.ceil(math.log(center) / math.log(gamma))
    values = [center * (1 + s) for s in spread] + [gamma ** (k + j) for j in on_bounds]
    one, many = QuantileSketch(), QuantileSketch()
    for v in values:
        one.add(v)
    many.add_many(values)
    assert (many.count, many.min, many.max, many.num_buckets) == (one.count, one.min, one.max, one.num_buckets)
    qs = [i / 100 for i in range(101)]
    assert [many.quantile(q) for q in qs] == [one.quantile(q) for q in qs]


def test_merged_sketches_answer_as_one_sketch_of_every_value() -> None:
    # Two data-parallel ranks' values, merged: the same buckets, hence the same quantiles, as one
    # sketch fed both sets; count, min and max exact.
    rng = random.Random(7)
    a_values = [rng.lognormvariate(-3, 0.5) for _ in range(500)] + [0.0, -0.002]
    b_values = [rng.lognormvariate(-2, 0.8) for _ in range(300)]
    a, b, both = QuantileSketch(), QuantileSketch(), QuantileSketch()
    a.add_many(a_values)
    b.add_many(b_values)
    both.add_many(a_values + b_values)
    a.merge(b)
    assert (a.count, a.min, a.max) == (802, min(a_values + b_values), max(a_values + b_values))
    for q in (0.0, 0.1, 0.5, 0.9, 0.99, 1.0):
        assert a.quantile(q) == both.quantile(q)
    with pytest.raises(ValueError, match="same accuracy"):
        a.merge(QuantileSketch(relative_accuracy=0.05))
