"""One replica in virtual time (``simulate``, a fleet of one): step boundaries, idle restarts, aborts, summaries.

The toy model (tests.engine.scheduler.builders.tiny_params) makes every step memory-bound:
duration = 1e6 B / 1e8 B/s + context x 1 B / 1e8 B/s = 0.01 + context x 1e-8 seconds.
"""

from __future__ import annotations

import math

import pytest

from llmsim.engine.scheduler import Percentiles, percentile
from llmsim.fleet import FleetRequest, poisson_arrivals, poisson_workload, simulate
from llmsim.types import FinishReason
from tests.engine.scheduler.builders import tiny_params


def d(context: int) -> float:
    return 0.01 + context * 1e-8


def test_an_idle_gpu_restarts_at_the_next_arrival() -> None:
    # a: prompt 4, 2 outputs at 0; b: same at 5 s, long after a ended. b's first step starts at 5.
    result = simulate(tiny_params(8), [FleetRequest.of(0.0, 4, 2), FleetRequest.of(5.0, 4, 2)])
    a, b = result.requests
    assert a.token_times == pytest.approx([d(4), d(4) + d(5)], rel=1e-12)
    assert b.token_times == pytest.approx([5.0 + d(4), 5.0 + d(4) + d(5)], rel=1e-12)
    assert b.queue_time == 0.0
    assert b.ttft == pytest.approx(d(4), rel=1e-12)
    assert [s.start for s in result.steps] == pytest.approx([0.0, d(4), 5.0, 5.0 + d(4)], rel=1e-12)


def test_a_request_arriving_mid_step_joins_the_next_step() -> None:
    # a's prefill runs [0, d(4)); b arrives at 0.005 and is first scheduled at d(4).
    result = simulate(tiny_params(8), [FleetRequest.of(0.0, 4, 3), FleetRequest.of(0.005, 4, 1)])
    b = result.requests[1]
    assert b.queue_time == pytest.approx(d(4) - 0.005, rel=1e-12)
    # Step 1 computes a's token 5 and b's 4-token prompt: context 5 + 4.
    assert b.token_times == pytest.approx([d(4) + d(9)], rel=1e-12)
    assert b.ttft == pytest.approx(d(4) + d(9) - 0.005, rel=1e-12)


def test_with_async_scheduling_a_request_arriving_mid_step_joins_one_step_later() -> None:
    # vLLM's async scheduling decides step 1 when step 0 starts (t = 0), before b arrives at
    # 0.005; b joins step 2, decided when step 1 starts at d(4).
    #   step 0 [0, d4):            a's prefill (4 tokens)
    #   step 1 [d4, d4 + d5):      a's token 5 (context 5)
    #   step 2 [.., .. + d(6+4)):  a's token 6 and b's prompt (context 6 + 4)
    result = simulate(tiny_params(8, async_scheduling=True), [FleetRequest.of(0.0, 4, 3), FleetRequest.of(0.005, 4, 1)])
    a, b = result.requests
    assert b.queue_time == pytest.approx(d(4) + d(5) - 0.005, rel=1e-12)
    assert b.token_times == pytest.approx([d(4) + d(5) + d(10)], rel=1e-12)
    assert a.token_times == pytest.approx([d(4), d(4) + d(5), d(4) + d(5) + d(10)], rel=1e-12)


def test_with_async_scheduling_an_idle_engine_still_starts_at_the_arrival() -> None:
    # Nothing running: no lookahead batch was scheduled, so the arrival is taken at once; the
    # second request arrives during b's own prefill and, b still running, waits a step more.
    result = simulate(tiny_params(8, async_scheduling=True), [FleetRequest.of(1.0, 4, 2), FleetRequest.of(1.001, 4, 1)])
    first, second = result.requests
    assert first.queue_time == 0.0
    assert first.ttft == pytest.approx(d(4), rel=1e-12)
    assert second.arrival + second.queue_time == pytest.approx(1.0 + d(4) + d(5), rel=1e-12)


def test_a_request_reaches_the_scheduler_a_request_overhead_after_its_arrival() -> None:
    # 4 ms of API-server work per request: a (at 0) starts its prefill at 0.004 on an idle GPU;
    # b arrives at 0.005, reaches the scheduler at 0.009, in the middle of a's prefill
    # [0.004, 0.004 + d4), and joins the step after it. TTFT and queue time count from the arrival.
    params = tiny_params(8, request_overhead_s=0.004)
    result = simulate(params, [FleetRequest.of(0.0, 4, 3), FleetRequest.of(0.005, 4, 1)])
    a, b = result.requests
    assert result.steps[0].start == 0.004
    assert a.ttft == pytest.approx(0.004 + d(4), rel=1e-12)
    assert a.queue_time == pytest.approx(0.004, rel=1e-12)
    assert b.queue_time == pytest.approx(0.004 + d(4) - 0.005, rel=1e-12)
    # Step 1 computes a's token 5 and b's 4-token prompt: context 5 + 4.
    assert b.ttft == pytest.approx(0.004 + d(4) + d(9) - 0.005, rel=1e-12)
    # The overhead is per request, not per step: a's decode steps follow each other directly.
    assert a.itl == pytest.approx([d(9), d(6)], rel=1e-12)


def test_ties_in_arrival_keep_workload_order() -> None:
    params = tiny_params(8, max_num_sequences=1)
    result = simulate(params, [FleetRequest.of(1.0, 4, 1), FleetRequest.of(0.0, 4, 1), FleetRequest.of(1.0, 4, 1)])
    starts = [r.arrival + r.queue_time for r in result.requests]
    assert starts[1] < starts[0] < starts[2]


def test_aborts_mid_step_before_arrival_and_after_the_end() -> None:
    # a: 5 outputs, leaves in the middle of its 3rd step -> 2 tokens, blocks freed at once.
    # b: leaves before it arrives -> counted as leaving at arrival, never scheduled.
    # c: leaves long after it finished -> nothing changes.
    leave_a = d(4) + d(5) + 0.5 * d(6)
    workload = [
        FleetRequest.of(0.0, 4, 5, abort_at=leave_a),
        FleetRequest.of(1.0, 4, 5, abort_at=0.5),
        FleetRequest.of(2.0, 4, 1, abort_at=99.0),
    ]
    result = simulate(tiny_params(8), workload, audit=True)
    a, b, c = result.requests
    assert a.finish_reason is FinishReason.ABORT
    assert a.output_tokens == 2
    assert a.e2e == pytest.approx(leave_a)
    assert b.finish_reason is FinishReason.ABORT
    assert b.output_tokens == 0
    assert b.ttft is None
    assert b.e2e == 0.0
    assert b.queue_time == 0.0
    assert c.finish_reason is FinishReason.STOP
    assert c.output_tokens == 1
    assert result.steps[-1].kv_used_blocks == 0
    summary = result.summary()
    assert (summary.num_finished, summary.num_aborted) == (1, 2)
    assert summary.latencies.e2e.count == 1  # aborted requests stay out of E2E


def test_poisson_arrivals_are_seeded_and_have_the_requested_rate() -> None:
    a = poisson_arrivals(20.0, 600.0, seed=7)
    assert a == poisson_arrivals(20.0, 600.0, seed=7)
    assert a != poisson_arrivals(20.0, 600.0, seed=8)
    assert a == sorted(a)
    assert a[0] > 0.0
    assert a[-1] < 600.0
    # Count ~ Poisson(12,000): standard deviation ~110, so 5 % is > 5 sigma.
    assert len(a) == pytest.approx(20 * 600, rel=0.05)
    workload = poisson_workload(20.0, 10.0, 100, 50, seed=1)
    assert {(w.prompt_tokens, w.output_tokens) for w in workload} == {(100, 50)}
    with pytest.raises(ValueError, match="rate"):
        poisson_arrivals(0.0, 1.0)


def test_percentiles_interpolate_linearly() -> None:
    # numpy.percentile([1, 2, 3, 4], q): position (n - 1) q / 100.
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile(values, 99) == pytest.approx(3.97)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert math.isnan(percentile([], 50))
    p = Percentiles.of([4.0, 1.0, 3.0, 2.0])
    assert (p.count, p.mean, p.p50) == (4, 2.5, 2.5)


def test_summary_totals() -> None:
    # Two requests in one batch: prompt 4 + 4, then one decode step for both.
    result = simulate(tiny_params(8), [FleetRequest.of(0.0, 4, 2), FleetRequest.of(0.0, 4, 2)])
    s = result.summary()
    assert s.replicas[0].num_steps == 2
    assert s.replicas[0].mean_batch_size == 2.0
    assert s.duration == pytest.approx(d(8) + d(10), rel=1e-12)
    assert s.output_tokens == 4
    assert s.output_tokens_per_s == pytest.approx(4 / s.duration)
    assert s.replicas[0].kv_total_blocks == 8
    assert s.replicas[0].kv_peak_used_blocks == 4
    assert s.latencies.itl.p50 == pytest.approx(d(10), rel=1e-12)
