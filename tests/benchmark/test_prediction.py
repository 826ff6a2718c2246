"""The virtual-time prediction of open loops, closed loops and conversations."""

from __future__ import annotations

import random

import pytest

from llmsim.benchmark import PromptShape, Shape, closed_loop, open_loop, predict
from llmsim.benchmark.prediction import TURNAROUND_S, predict_fleet
from llmsim.benchmark.workload import Chain, Role, Segment, Turn, TurnSource, Workload
from llmsim.fleet import FleetRequest, FleetSpec, ReplicaGroup, RouterSpec, simulate
from tests.engine.scheduler.builders import roofline, seed_params


def test_an_open_loop_is_one_simulation_of_the_same_requests() -> None:
    arrivals = [0.0, 0.01, 0.02, 0.5]
    prediction = predict(seed_params(), open_loop(arrivals, PromptShape(512, 20)))
    direct = simulate(seed_params(), [FleetRequest.of(t, 512, 20) for t in arrivals])
    assert prediction.passes == 1
    assert [r.scheduled for r in prediction.records] == arrivals
    assert [r.token_times for r in prediction.records] == [list(r.token_times) for r in direct.requests]
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
    items = [FleetRequest.of(r.scheduled, 200, r.expected_output_tokens) for r in prediction.records]
    again = simulate(seed_params(), items)
    ends = {(r.chain, r.turn): r.end for r in prediction.records}
    for r, sim in zip(prediction.records, again.requests, strict=True):
        assert sim.arrival + sim.e2e == ends[(r.chain, r.turn)]
    starts = {(r.chain, r.turn): r.scheduled for r in prediction.records}
    for (chain, turn), start in starts.items():
        if turn > 0:
            assert start == pytest.approx(ends[(chain, turn - 1)] + TURNAROUND_S, abs=1e-12)


def test_shared_system_prompts_hit_the_prefix_cache_as_on_the_server() -> None:
    # Three requests 1 s apart (each alone), a 1,000-token system prompt and 24 tokens of their own:
    # the 2nd and 3rd find the system prompt's 62 full blocks of 16 = 992 tokens.
    shape = PromptShape(1024, 4, Shape.SHARED_PREFIX, system_prompt_tokens=1000)
    prediction = predict(seed_params(), open_loop([0.0, 1.0, 2.0], shape))
    assert [r.cached_tokens for r in prediction.records] == [0, 992, 992]
    # Alone on the GPU, a hit request computes its last 32 tokens over its 1,024-token context.
    second = prediction.records[1]
    assert second.token_times[0] - second.scheduled == pytest.approx(roofline(32, 1024), rel=1e-9)
    off = predict(seed_params(enable_prefix_caching=False), open_loop([0.0, 1.0, 2.0], shape))
    assert [r.cached_tokens for r in off.records] == [0, 0, 0]


def test_a_fleet_prediction_routes_the_same_requests_through_the_fleet() -> None:
    shape = PromptShape(1024, 16, Shape.SHARED_PREFIX, system_prompt_tokens=1000)
    workload = open_loop([0.0, 0.001, 0.002, 0.003, 0.5, 0.501], shape)
    # One replica: the one-replica prediction, token for token and hit for hit.
    one = FleetSpec((ReplicaGroup("r", "m", seed_params(), 1),), RouterSpec("round-robin", 0.0))
    alone = predict(seed_params(), workload)
    through_fleet = predict_fleet(one, workload)
    assert [(r.token_times, r.end, r.cached_tokens) for r in through_fleet.records] == [
        (r.token_times, r.end, r.cached_tokens) for r in alone.records
    ]
    # Two replicas in turn: each serves every other request, as if alone with those.
    two = FleetSpec((ReplicaGroup("r", "m", seed_params(), 2),), RouterSpec("round-robin", 0.0))
    split = predict_fleet(two, workload)
    for parity in (0, 1):
        mine = Workload(workload.chains[parity::2])
        expected = predict(seed_params(), mine)
        got = split.records[parity::2]
        assert [(r.token_times, r.cached_tokens) for r in got] == [
            (r.token_times, r.cached_tokens) for r in expected.records
        ]


def test_a_disaggregated_fleet_prediction_times_the_hand_off() -> None:
    # One request alone on 1 prefill + 1 decode replica: prefill of 256 tokens, the pull of 256
    # tokens' KV over a 50 GB/s link (+ 0.5 ms), the recompute of the last prompt token, 3 decodes.
    from llmsim.engine.scheduler.kv_link import KVLinkSpec
    from tests.engine.scheduler.builders import KV_PER_TOKEN

    link = KVLinkSpec(50e9, 0.0005)
    fleet = FleetSpec(
        (
            ReplicaGroup("p", "m", seed_params(), 1, kv_role="kv_producer", kv_link=link),
            ReplicaGroup("d", "m", seed_params(), 1, kv_role="kv_consumer", kv_link=link),
        ),
        RouterSpec("round-robin", 0.0),
    )
    (record,) = predict_fleet(fleet, open_loop([0.0], PromptShape(256, 4))).records
    first = roofline(256, 256) + 256 * KV_PER_TOKEN / 50e9 + 0.0005 + roofline(1, 256)
    decodes = [roofline(1, 256 + j) for j in range(1, 4)]
    expected = [first + sum(decodes[:k]) for k in range(4)]
    assert record.token_times == pytest.approx(expected, rel=1e-9)
