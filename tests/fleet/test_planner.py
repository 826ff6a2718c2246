"""Questions asked of a fleet: router comparison, SLO sweeps over rates and replica counts."""

from __future__ import annotations

import pytest

from llmsim.fleet import (
    Slo,
    SloTarget,
    WorkloadShape,
    compare_routers,
    generate,
    plan_fleet,
    replicas_for_slo,
    sweep_rates,
)
from tests.engine.scheduler.builders import seed_params

from .builders import fleet_of

# The reference model, 1,000-token prompts and 100-token outputs: one replica takes roughly 10 req/s.
SHAPE = WorkloadShape(rate=10.0, duration=20.0, prompt_tokens=1000, output_tokens=100, seed=2)
SLO = Slo((SloTarget.parse("ttft_p99=300"), SloTarget.parse("itl_p50<=40ms")))


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("ttft_p99=500", SloTarget("ttft", "p99", 0.5)),
        ("itl_p50<=30ms", SloTarget("itl", "p50", 0.03)),
        ("e2e_p90<=8s", SloTarget("e2e", "p90", 8.0)),
        ("queue_time_mean=2.5", SloTarget("queue_time", "mean", 0.0025)),
    ],
)
def test_slo_targets_parse(text: str, target: SloTarget) -> None:
    assert SloTarget.parse(text) == target


def test_a_bad_slo_is_refused() -> None:
    with pytest.raises(ValueError, match="bad SLO 'ttft_p95=5'"):
        SloTarget.parse("ttft_p95=5")


def test_compare_runs_the_same_workload_behind_each_router() -> None:
    fleet = fleet_of(seed_params(), 3, "least-requests", scrape=0.05)
    plans = compare_routers(fleet, generate(SHAPE.with_rate(20.0)), ["round-robin", "least-requests", "random"])
    assert [p.fleet.router.policy for p in plans] == ["round-robin", "least-requests", "random"]
    assert len({p.summary.num_requests for p in plans}) == 1
    # Round-robin splits requests evenly (within one); random does not.
    rr, _, rnd = (p.summary for p in plans)
    counts = [r.num_requests for r in rr.replicas]
    assert max(counts) - min(counts) <= 1
    assert rnd.load_imbalance > rr.load_imbalance


def test_the_rate_sweep_reports_the_highest_passing_rate() -> None:
    fleet = fleet_of(seed_params(), 1)
    rates = [2.0, 5.0, 30.0, 60.0]
    sweep = sweep_rates(fleet, SHAPE, rates, SLO)
    # Each point is exactly the run of that rate on its own.
    for point in sweep.points:
        alone = plan_fleet(fleet, generate(SHAPE.with_rate(point.rate)))
        assert point.plan.summary == alone.summary
        assert point.meets_slo == SLO.met_by(alone.summary)
    passing = [p.rate for p in sweep.points if p.meets_slo]
    assert sweep.best_rate == max(passing)
    assert sweep.points[0].meets_slo
    assert not sweep.points[-1].meets_slo  # 60 req/s of 1,000-token prompts swamp one replica


def test_replicas_for_slo_is_the_fewest_that_meet_it() -> None:
    fleet = fleet_of(seed_params(), 1, "least-requests")
    workload = generate(SHAPE.with_rate(45.0))
    search = replicas_for_slo(fleet, workload, SLO)
    # Independent check: count up one by one.
    first = next(n for n in range(1, 20) if SLO.met_by(plan_fleet(fleet.with_count("r", n), workload).summary))
    assert search.best_count == first
    assert first > 1
    tried = {n: ok for n, _, ok in search.tried}
    assert tried[first]
    assert not tried.get(first - 1, False)


def test_replicas_for_slo_gives_up_at_the_maximum() -> None:
    fleet = fleet_of(seed_params(), 1)
    impossible = Slo((SloTarget("ttft", "p50", 1e-6),))
    search = replicas_for_slo(fleet, generate(SHAPE), impossible, max_replicas=4)
    assert search.best_count is None
    assert [n for n, _, _ in search.tried] == [1, 2, 4]
