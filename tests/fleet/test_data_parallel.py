"""Data-parallel replicas in the planner: ranks are simulated GPUs, picked by vLLM's internal load
balancer or by a router that sees ranks."""

from __future__ import annotations

import pytest

from llmsim.fleet import FleetSpec, FleetWorkload, ReplicaGroup, RouterSpec, compare_routers, simulate, simulate_fleet
from llmsim.fleet.report import describe_fleet, format_comparison
from llmsim.fleet.spec import RouterPolicy
from tests.engine.scheduler.builders import seed_params

from .builders import request, workload


def dp_fleet(ranks: int, count: int = 1, policy: RouterPolicy = "round-robin", *, dp_aware: bool = False) -> FleetSpec:
    group = ReplicaGroup("dp", "m", seed_params(), count, ranks)
    return FleetSpec((group,), RouterSpec(policy, 0.0, dp_aware=dp_aware))


def test_ranks_pinned_in_turn_are_independent_gpus() -> None:
    """Three ranks with every request pinned (a rank-aware round-robin router): rank r serves
    requests r, r + 3, ...: each rank's latencies are those of one GPU simulated alone."""
    shapes = [(0.013 * i, 200 + 37 * (i % 5), 20 + 11 * (i % 4)) for i in range(24)]
    fleet = simulate_fleet(dp_fleet(3, dp_aware=True), workload(*shapes), keep_token_times=True)
    assert [r.name for r in fleet.replicas] == ["dp/0/0", "dp/0/1", "dp/0/2"]
    for rank in range(3):
        mine = [i for i in range(len(shapes)) if i % 3 == rank]
        alone = simulate(seed_params(), [request(i, *shapes[i]) for i in mine])
        got = [fleet.requests[i] for i in mine]
        assert all(o.replica == rank for o in got)
        assert [o.token_times for o in got] == [o.token_times for o in alone.requests]


def test_internal_balancer_picks_as_vllm_on_a_hand_checked_workload() -> None:
    """Two ranks behind one port. At 0: A (long) and B (short): empty ranks, the scan from rank 0
    gives A rank 0, then (scan from 1) B rank 1. B is done long before 1 s; at 1 s the snapshot shows
    rank 0 running A, rank 1 empty: C scores 0 on rank 1 against 1 on rank 0 -> rank 1. D, at the
    same instant, scanning from rank 1: rank 1 scores max(1 in flight, 1 waiting) = 1, rank 0 scores
    1 (A running): a tie, the first scanned (rank 1) wins."""
    shapes = [(0.0, 100, 2000), (0.0, 100, 2), (1.0, 100, 5), (1.0, 100, 5)]
    result = simulate_fleet(dp_fleet(2), workload(*shapes))
    assert result.requests[1].e2e < 1.0 < result.requests[0].e2e
    assert [o.replica for o in result.requests] == [0, 1, 1, 1]
    # A round-robin over ranks would have put C on rank 0.
    aware = simulate_fleet(dp_fleet(2, dp_aware=True), workload(*shapes))
    assert [o.replica for o in aware.requests] == [0, 1, 0, 1]


def test_router_sees_one_endpoint_per_replica() -> None:
    """Two replicas of two ranks behind round-robin: replicas alternate (requests 0, 2 on replica 0,
    whose balancer spreads them over its ranks 0 and 1; 1, 3 likewise on replica 1)."""
    shapes = [(0.0, 100, 50)] * 4
    result = simulate_fleet(dp_fleet(2, count=2), workload(*shapes))
    assert [r.name for r in result.replicas] == ["dp/0/0", "dp/0/1", "dp/1/0", "dp/1/1"]
    assert [o.replica for o in result.requests] == [0, 2, 1, 3]


def test_compare_runs_each_router_seeing_replicas_then_ranks() -> None:
    shapes = [(0.01 * i, 300, 40 + (i % 7) * 30) for i in range(60)]
    plans = compare_routers(dp_fleet(4, count=2), FleetWorkload(workload(*shapes).requests), ["least-requests"])
    assert [p.fleet.router.dp_aware for p in plans] == [False, True]
    assert all(p.summary.num_finished == 60 for p in plans)
    text = format_comparison(plans, 1.0)
    assert "least-requests (ranks)" in text
    assert "8 GPUs" in describe_fleet(plans[0].fleet)


def test_a_group_needs_one_rank_at_least() -> None:
    with pytest.raises(ValueError, match="data_parallel must be >= 1"):
        ReplicaGroup("dp", "m", seed_params(), 1, 0)
