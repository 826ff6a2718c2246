"""Percentiles and load figures, checked against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from llmsim.benchmark import Distribution, Outcome, RequestRecord, summarize


def test_percentiles_interpolate_linearly_between_ranks() -> None:
    # 10 values 1..10: rank position (n - 1) x q: p50 at 4.5 -> 5.5, p90 at 8.1 -> 9.1, p99 at 8.91 -> 9.91.
    d = Distribution.of([7.0, 1.0, 10.0, 3.0, 2.0, 9.0, 4.0, 8.0, 6.0, 5.0])
    assert (d.count, d.mean, d.max) == (10, 5.5, 10.0)
    assert d.p50 == pytest.approx(5.5)
    assert d.p90 == pytest.approx(9.1)
    assert d.p99 == pytest.approx(9.91)


def test_percentiles_of_one_value_and_of_none() -> None:
    one = Distribution.of([0.25])
    assert (one.p50, one.p90, one.p99, one.max, one.mean) == (0.25, 0.25, 0.25, 0.25, 0.25)
    empty = Distribution.of([])
    assert empty.count == 0
    assert all(math.isnan(x) for x in (empty.mean, empty.p50, empty.p99, empty.max))


def record(chain: int, scheduled: float, sent: float, times: list[float], end: float, **kw: object) -> RequestRecord:
    fields: dict[str, object] = {"outcome": Outcome.OK, "output_tokens": len(times)} | kw
    return RequestRecord(
        chain=chain,
        turn=0,
        scheduled=scheduled,
        sent=sent,
        expected_prompt_tokens=100,
        expected_output_tokens=len(times),
        token_times=times,
        end=end,
        **fields,  # type: ignore[arg-type]
    )


def test_summary_counts_from_the_schedule_and_from_the_send() -> None:
    records = [
        # On time: TTFT 0.1, gaps 0.02 and 0.03, ends at 1.2.
        record(0, 1.0, 1.0, [1.1, 1.12, 1.15], 1.2, prompt_tokens=100),
        # Sent 0.5 s late (the client was held back): TTFT 0.6 from the schedule, 0.1 from the send.
        record(1, 2.0, 2.5, [2.6, 2.64], 2.7, prompt_tokens=99),
        # A 503 and a hang-up: neither is a completed request.
        record(2, 3.0, 3.0, [], 3.01, outcome=Outcome.ERROR, error="http 503 server_overloaded", status=503),
        record(3, 3.5, 3.5, [3.6], 3.8, outcome=Outcome.ABORTED),
        # Warm-up and background requests are left out.
        record(4, 0.5, 0.5, [0.6], 0.7),
        record(5, 1.5, 1.5, [9.0], 9.5, background=True),
    ]
    s = summarize(records, warmup=1.0)
    assert (s.requests, s.completed, s.aborted) == (4, 2, 1)
    assert s.errors == {"http 503 server_overloaded": 1}
    # First measured schedule 1.0, last end 3.8.
    assert s.window == pytest.approx(2.8)
    assert s.request_rate == pytest.approx(2 / 2.8)
    # 3 + 2 + 0 + 1 tokens (the aborted request's token was received).
    assert s.output_tokens == 6
    assert s.output_token_rate == pytest.approx(6 / 2.8)
    assert s.ttft.max == pytest.approx(0.6)
    assert s.ttft.count == 2
    assert s.ttft_sent.max == pytest.approx(0.1)
    assert s.e2e.max == pytest.approx(0.7)
    assert s.e2e_sent.max == pytest.approx(0.2)
    # Gaps 0.02, 0.03 and 0.04.
    assert s.itl.count == 3
    assert s.itl.p50 == pytest.approx(0.03)
    # TPOT: (1.15 - 1.1) / 2 and (2.64 - 2.6) / 1.
    assert s.tpot.count == 2
    assert s.tpot.max == pytest.approx(0.04)
    assert s.tpot.p50 == pytest.approx(0.0325)
    assert s.send_delay.max == pytest.approx(0.5)
    # The second request's usage said 99 prompt tokens for a 100-token prompt.
    assert s.prompt_mismatches == 1
