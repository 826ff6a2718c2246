"""Percentiles of counted values equal those of the expanded list; a fleet summary's counts."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from llmsim.engine.scheduler import Percentiles
from llmsim.fleet import FleetResult, OrderedCounts, ReplicaReport, RequestOutcome, counted_percentiles
from llmsim.fleet.fleet_summary import merged_entries
from llmsim.types import FinishReason


def assert_percentiles_of_expanded(parts: list[dict[float, int]]) -> None:
    expanded = [v for part in parts for v, c in part.items() for _ in range(c)]
    # As counters, and as the ordered counts a fleet summary makes once per replica.
    for got in (
        counted_percentiles(*(Counter(part) for part in parts)),
        counted_percentiles(*map(OrderedCounts, parts)),
    ):
        if not expanded:
            assert got.count == 0
            continue
        want = Percentiles.of(expanded)
        assert (got.count, got.p50, got.p90, got.p99) == (want.count, want.p50, want.p90, want.p99)
        assert abs(got.mean - want.mean) <= 1e-12 * max(1.0, abs(want.mean))


@given(st.dictionaries(st.floats(0, 10, allow_nan=False), st.integers(1, 5), max_size=30))
def test_counted_percentiles_match_the_expanded_values(counts: dict[float, int]) -> None:
    assert_percentiles_of_expanded([counts])


@given(st.lists(st.dictionaries(st.sampled_from([0.5, 1.0, 1.25, 2.0, 7.5]), st.integers(0, 5)), max_size=4))
def test_counted_percentiles_of_several_counters_are_those_of_their_union(parts: list[dict[float, int]]) -> None:
    # A fleet's gaps: one counter per replica, the same value often in several of them (a count
    # of 0: a step whose every token was a first one, which has no gap).
    assert_percentiles_of_expanded(parts)


@given(
    st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 1.25, 2.0, 7.5, 1e-3]), st.integers(0, 5)), max_size=40).map(
        lambda pairs: ([v for v, _ in pairs], [c for _, c in pairs])
    )
)
def test_merged_entries_are_the_distinct_values_and_their_summed_counts(
    entries: tuple[list[float], list[int]],
) -> None:
    # What a replica counts: (gap, count) entries in counting order, a gap often in several.
    values, counts = entries
    merged: Counter[float] = Counter()
    for value, count in zip(values, counts, strict=True):
        merged[value] += count
    want = sorted((v, c) for v, c in merged.items() if c)
    distinct, sums = merged_entries(values, counts)
    assert list(zip(distinct, sums, strict=True)) == want
    # The same whatever the entries' order or split (stepping and jumping differ in both).
    split = [(v, 1) for v, c in zip(values, counts, strict=True) for _ in range(c)]
    assert merged_entries([v for v, _ in reversed(split)], [c for _, c in reversed(split)]) == (distinct, sums)
    got = OrderedCounts.of_sorted(distinct, sums)
    expect = OrderedCounts({v: c for v, c in want})
    assert (got.values, got.cumulative, got.total, got.products) == (
        expect.values,
        expect.cumulative,
        expect.total,
        expect.products,
    )
    assert_percentiles_of_expanded([dict(merged)])


def test_a_fleet_summary_counts_each_request_once_where_it_belongs() -> None:
    # Two replicas. Replica 0: a finished request (ttft 0.5, e2e 2, queue 0.25, tpot 0.1, 100 of
    # 200 prompt tokens hit) and a rejected one. Replica 1: a finished request (ttft 1.5, e2e 4,
    # queue 0.75, no tpot, 0 of 200 hit) and an aborted one (queue 1, 3 tokens out). One request
    # never sent (its client left while it waited): aborted, in no replica.
    stop, abort = FinishReason.STOP, FinishReason.ABORT
    outcomes = [
        RequestOutcome(0, 0, 0.0, 200, 10, stop, 0.5, 2.0, 0.25, 0, 0.1, 100, 200),
        RequestOutcome(1, 0, 0.0, 200, 0, abort, None, 0.0, 0.0, 0, None, rejected=True),
        RequestOutcome(2, 1, 1.0, 200, 5, stop, 1.5, 4.0, 0.75, 0, None, 0, 200),
        RequestOutcome(3, 1, 1.0, 200, 3, abort, 2.0, 3.0, 1.0, 0, 0.5, 0, 200),
        RequestOutcome(4, -1, 2.0, 200, 0, abort, None, 0.0, 0.0, 0, None),
    ]
    reports = [ReplicaReport(f"g/{k}", "g", "m", 2, 10, 5.0, 20, 0, 100, 50, [0.1], [9]) for k in range(2)]
    summary = FleetResult(outcomes, reports, 10.0).summary()
    one, two = summary.replicas
    assert (one.num_requests, one.num_finished, one.num_aborted, one.num_rejected) == (2, 1, 0, 1)
    assert (two.num_requests, two.num_finished, two.num_aborted, two.num_rejected) == (2, 1, 1, 0)
    assert (summary.num_requests, summary.num_finished, summary.num_aborted, summary.num_rejected) == (5, 2, 2, 1)
    assert (one.output_tokens, two.output_tokens, summary.output_tokens) == (10, 8, 18)
    assert (one.prefix_hit_rate, two.prefix_hit_rate) == (0.5, 0.0)
    assert summary.prefix_hit_rate == 100 / 600
    fleet = summary.latencies
    # TTFT of every request that got a token: 0.5, 1.5, 2.0; E2E of the finished: 2, 4; queue
    # time of every sent request not rejected: 0.25, 0.75, 1.0; TPOT where given: 0.1, 0.5.
    assert (fleet.ttft.count, fleet.ttft.p50, fleet.ttft.mean) == (3, 1.5, 4.0 / 3)
    assert (fleet.e2e.count, fleet.e2e.mean) == (2, 3.0)
    assert (fleet.queue_time.count, fleet.queue_time.p50) == (3, 0.75)
    assert (fleet.tpot.count, fleet.tpot.mean) == (2, 0.3)
    assert (fleet.itl.count, fleet.itl.p50) == (18, 0.1)
    assert (one.latencies.ttft.count, two.latencies.queue_time.count) == (1, 2)
