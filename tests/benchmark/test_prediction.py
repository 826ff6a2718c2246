"""The virtual-time prediction of open loops, closed loops and conversations."""

from __future__ import annotations

import random

import pytest

from llmsim.benchmark import PromptShape, closed_loop, open_loop, predict
from llmsim.benchmark.prediction import TURNAROUND_S
from llmsim.benchmark.workload import Chain, Role, Segment, Turn, TurnSource, Workload
from llmsim.engine.scheduler import WorkloadItem, simulate
from tests.engine.scheduler.builders import roofline, seed_params


def test_an_open_loop_is_one_simulation_of_the_same_requests() -> None:
    arrivals = [0.0, 0.01, 0.02, 0.5]
    prediction = predict(seed_params(), open_loop(arrivals, PromptShape(512, 20)))
    direct = simulate(seed_params(), [WorkloadItem(t, 512, 20) for t in arrivals])
    assert prediction.passes == 1
    assert [r.scheduled for r in prediction.records] == arrivals
    assert [r.token_times for r in prediction.records] == [r.token_times for r in direct.requests]
    assert [r.end - r.scheduled for r in prediction.records] == [r.e2e for r in direct.requests]


def test_one_closed_loop_stream_sends_each_turn_a_round_trip_after_the_last_ended() -> None:
    # Alone on the GPU, each request costs one prefill step and 9 decode steps, worked out from the
    # roofline: prompt 128, decode step j reads 128 + j tokens.
    one = roofline(128, 128) + sum(roofline(1, 128 + j) for j in range(1, 10))
    prediction = predict(seed_params(), closed_loop(1, PromptShape(128, 10), requests=3))
    starts = [r.scheduled for r in prediction.records]
    assert starts == pytest.approx([0.0, one + TURNAROUND_S, 2 * (one + TURNAROUND_S)], rel=1e-9)
    assert all(r.end - r.scheduled == pytest.approx(one, rel=1e-9) for r in prediction.records)


def test_equal_closed_loop_streams_stay_in_phase() -> None:
    # 4 streams x 3 turns, all the same length: every turn of every stream starts together.
    prediction = predict(seed_params(), closed_loop(4, PromptShape(256, 16), requests=12))
    by_turn: dict[int, set[float]] = {}
    for r in prediction.records:
        by_turn.setdefault(r.turn, set()).add(r.scheduled)
    assert sorted(by_turn) == [0, 1, 2]
    assert all(len(starts) == 1 for starts in by_turn.values())
    assert len(prediction.records) == 12


def test_the_fixed_point_is_the_simulation_of_its_own_arrivals() -> None:
    # Random lengths (outputs 5..40) break the phase; the settled arrivals, simulated once more as
    # an open loop, give back exactly the ends the closed loop used.
    def source(w: int) -> TurnSource:
        return lambda j: (
            Turn((Segment(Role.USER, (w, j), 200),), random.Random(w * 97 + j).randint(5, 40)) if j < 5 else None
        )

    workload = Workload(tuple(Chain(0.0, source(w)) for w in range(6)))
    prediction = predict(seed_params(), workload)
    assert prediction.passes > 2
    assert len(prediction.records) == 30
    items = [WorkloadItem(r.scheduled, 200, r.expected_output_tokens) for r in prediction.records]
    again = simulate(seed_params(), items)
    ends = {(r.chain, r.turn): r.end for r in prediction.records}
    for r, sim in zip(prediction.records, again.requests, strict=True):
        assert sim.arrival + sim.e2e == ends[(r.chain, r.turn)]
    starts = {(r.chain, r.turn): r.scheduled for r in prediction.records}
    for (chain, turn), start in starts.items():
        if turn > 0:
            assert start == pytest.approx(ends[(chain, turn - 1)] + TURNAROUND_S, abs=1e-12)
