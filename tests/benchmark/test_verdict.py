"""The verdict's arithmetic on hand-made records: phases, counts, percentiles, ejection and return times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmsim.benchmark.verdict import ClientRecord, ReplicaRecord, judge, phases_of, render

# Replica b is bad from 2 s to 5 s.
TIMELINE: dict[str, Any] = {
    "timeline": {
        "start": "admin",
        "seed": 0,
        "phases": [
            {"name": "down", "at": 2.0, "replicas": [1], "set": {}, "clear": False},
            {"name": "up", "at": 5.0, "clear": True},
        ],
    },
}


def replica(name: str, ordinal: int, bad: bool, times: list[float], faults: list[str | None]) -> ReplicaRecord:
    state = TIMELINE | {"affected": {"down": bad, "up": False}}
    return ReplicaRecord(name, ordinal, state, {"t": times, "fault": faults})


def test_phases_end_where_the_next_starts_and_the_run_ends() -> None:
    assert [(p.name, p.start, p.end) for p in phases_of(TIMELINE, 8.0)] == [
        ("base", 0.0, 2.0),
        ("down", 2.0, 5.0),
        ("up", 5.0, 8.0),
    ]
    # A phase after the run's end is left out.
    assert [p.name for p in phases_of(TIMELINE, 4.0)] == ["base", "down"]


def test_counts_ejection_and_return() -> None:
    # b: healthy at 0.5 and 1.5; fails at 2.1, 2.2, 2.3; silent until a probe at 4.6 (fails); back at 5.4.
    b = replica("b", 1, True, [0.5, 1.5, 2.1, 2.2, 2.3, 4.6, 5.4, 6.0], [None, None, *["unavailable"] * 4, None, None])
    a = replica("a", 0, False, [0.2, 1.0, 2.05, 2.5, 3.0, 4.0, 5.1, 6.5], [None] * 8)
    client = [
        ClientRecord(0.2, 200, 0.030, "a"),
        ClientRecord(0.5, 200, 0.040, "b"),
        ClientRecord(2.1, 200, 0.100, "a"),  # retried from b to a
        ClientRecord(2.2, 503, 0.050, None),
        ClientRecord(3.0, 200, 0.020, "a"),
        ClientRecord(5.4, 200, 0.060, "b"),
    ]
    verdict = judge([a, b], client, 8.0, gap=1.0)
    base, down, up = verdict.phases
    assert (verdict.sent, verdict.errors) == (6, 1)
    assert verdict.error_rate == pytest.approx(1 / 6)
    assert (down.sent, down.errors) == (3, 1)
    assert down.error_rate == pytest.approx(1 / 3)
    # Nearest rank over the 2 successes of "down" (0.020, 0.100): p50 is the 1st, p90 and p99 the 2nd.
    assert (down.latency.n, down.latency.p50, down.latency.p90, down.latency.p99) == (2, 0.020, 0.100, 0.100)
    rows = {row.replica: row for row in down.replicas}
    assert (rows["b"].affected, rows["b"].received, rows["b"].faults) == (True, 4, 4)
    assert (rows["a"].affected, rows["a"].received, rows["a"].faults, rows["a"].answered.n) == (False, 4, 0, 2)
    assert [row.received for row in base.replicas] == [2, 2]
    assert [row.received for row in up.replicas] == [2, 2]
    (ejection,) = verdict.ejections
    # The silence 2.3 -> 4.6 (2.3 s) is the first of at least 1 s after 2.0: it starts at 2.3.
    assert ejection.ejected_after_s == pytest.approx(0.3)
    assert ejection.requests_before_ejection == 3
    assert ejection.recovery_phase == "up"
    assert ejection.returned_after_s == pytest.approx(0.4)
    text = render(verdict)
    assert "b in down: ejected after 0.30 s (3 requests), taken back 0.40 s into up" in text


def test_a_replica_never_silent_or_never_back_says_so() -> None:
    # b gets a request every 0.5 s throughout and nothing after the recovery.
    times = [2.0 + 0.5 * i for i in range(6)]
    b = replica("b", 1, True, times, ["server_error"] * 6)
    (ejection,) = judge([b], [], 8.0, gap=1.0).ejections
    assert ejection.ejected_after_s is None
    assert ejection.requests_before_ejection == 6
    assert ejection.returned_after_s is None
    assert "ejected after never" in render(judge([b], [], 8.0, gap=1.0))


def test_a_replica_that_got_nothing_in_its_bad_phase_was_ejected_at_once() -> None:
    b = replica("b", 1, True, [1.0, 6.0], [None, None])
    (ejection,) = judge([b], [], 8.0, gap=1.0).ejections
    assert (ejection.ejected_after_s, ejection.requests_before_ejection, ejection.returned_after_s) == (0.0, 0, 1.0)


def test_the_plot_has_a_line_per_replica_and_the_client_errors(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from llmsim.benchmark.verdict_plot import plot_verdict

    a = replica("a", 0, False, [0.2, 3.0], [None, None])
    b = replica("b", 1, True, [2.1], ["unavailable"])
    client = [ClientRecord(2.1, 503, 0.01)]
    verdict = judge([a, b], client, 6.0, gap=1.0)
    labels = plot_verdict(verdict, [a, b], client, tmp_path / "v.png")
    assert labels == ["a", "b", "client errors"]
    assert (tmp_path / "v.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
