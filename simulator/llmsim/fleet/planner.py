"""Questions asked of a fleet: what it does under a load, which router is best, how much load it
takes within an SLO, and how few replicas meet one.

Each answer is one or more :func:`simulate_fleet` runs; wall-clock time is measured by the
caller (this module, like the rest of the fleet core, never reads a clock).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from llmsim.engine.scheduler.percentiles import Percentiles
from llmsim.fleet.fleet_result import FleetResult
from llmsim.fleet.fleet_summary import FleetSummary
from llmsim.fleet.simulation import simulate_fleet
from llmsim.fleet.spec import FleetSpec, RouterPolicy
from llmsim.fleet.workload import FleetWorkload, WorkloadShape, generate

SloMetric = Literal["ttft", "itl", "tpot", "e2e", "queue_time"]
SloStat = Literal["p50", "p90", "p99", "mean"]
_SLO = re.compile(r"^(ttft|itl|tpot|e2e|queue_time)_(p50|p90|p99|mean)\s*(?:<=|=)\s*([0-9.]+(?:e-?[0-9]+)?)\s*(ms|s)?$")


@dataclass(frozen=True, slots=True)
class FleetPlan:
    """One run: the fleet, the full result and its summary."""

    fleet: FleetSpec
    result: FleetResult
    summary: FleetSummary


def plan_fleet(fleet: FleetSpec, workload: FleetWorkload, *, keep_token_times: bool = False) -> FleetPlan:
    """Simulate ``workload`` on ``fleet`` and summarise it (the entry point for other tools).

    Raises ValueError for a workload the fleet cannot take (a prompt longer than a replica's context).
    """
    result = simulate_fleet(fleet, workload, keep_token_times=keep_token_times)
    return FleetPlan(fleet, result, result.summary())


def compare_routers(fleet: FleetSpec, workload: FleetWorkload, policies: Sequence[RouterPolicy]) -> list[FleetPlan]:
    """The same workload through the same replicas behind each router in turn.

    With data-parallel replicas balanced by their own API server, each router runs twice: seeing
    replicas (vLLM's internal load balancer picks the rank), then seeing every rank (and pinning it).
    A disaggregated fleet runs twice too: as it is (the router's prefill and decode picks both
    the router), then as the aggregated fleet of the same GPUs (:meth:`FleetSpec.aggregated`).
    """
    if fleet.disaggregated:
        # Beside each P/D run, the same GPUs serving whole requests.
        aggregated = fleet.aggregated()
        return [plan_fleet(f.with_router(p), workload) for p in policies for f in (fleet, aggregated)]
    both = any(g.count and g.data_parallel > 1 and not g.external_lb for g in fleet.groups)
    views = (False, True) if both else (fleet.router.dp_aware,)
    return [plan_fleet(fleet.with_router(p, dp_aware=aware), workload) for p in policies for aware in views]


@dataclass(frozen=True, slots=True)
class SloTarget:
    """``<metric>_<stat> <= limit`` (seconds), e.g. TTFT p99 <= 0.5 s."""

    metric: SloMetric
    stat: SloStat
    limit: float

    @classmethod
    def parse(cls, text: str) -> SloTarget:
        """``ttft_p99=500`` or ``itl_p50<=30ms`` or ``e2e_p90<=8s`` (milliseconds unless ``s``)."""
        m = _SLO.match(text.strip())
        if m is None:
            raise ValueError(
                f"bad SLO '{text}': expected <metric>_<stat>=<limit>, metric one of ttft, itl, tpot, e2e,"
                " queue_time, stat one of p50, p90, p99, mean, limit in ms (or with 's'), e.g. ttft_p99=500"
            )
        metric, stat, value, unit = m.groups()
        limit = float(value) / (1.0 if unit == "s" else 1000.0)
        return cls(metric, stat, limit)  # type: ignore[arg-type]

    def value(self, summary: FleetSummary) -> float:
        p: Percentiles = getattr(summary.latencies, self.metric)
        result: float = getattr(p, self.stat)
        return result

    def met_by(self, summary: FleetSummary) -> bool:
        v = self.value(summary)
        return not math.isnan(v) and v <= self.limit

    def __str__(self) -> str:
        return f"{self.metric} {self.stat} <= {self.limit * 1000:g} ms"


@dataclass(frozen=True, slots=True)
class Slo:
    """Every target must hold, and no request may be refused (a full queue is not "served")."""

    targets: tuple[SloTarget, ...]

    def met_by(self, summary: FleetSummary) -> bool:
        return summary.num_rejected == 0 and all(t.met_by(summary) for t in self.targets)

    def __str__(self) -> str:
        return ", ".join(str(t) for t in self.targets)


@dataclass(frozen=True, slots=True)
class RatePoint:
    rate: float
    plan: FleetPlan
    meets_slo: bool


@dataclass(frozen=True, slots=True)
class RateSweep:
    """Each rate's run, and the highest rate whose run met the SLO (None if none did)."""

    points: tuple[RatePoint, ...]
    best_rate: float | None


def sweep_rates(fleet: FleetSpec, shape: WorkloadShape, rates: Sequence[float], slo: Slo) -> RateSweep:
    """Run ``shape`` at each rate (same seed) and find the highest rate that meets ``slo``."""
    points = []
    for rate in sorted(rates):
        plan = plan_fleet(fleet, generate(shape.with_rate(rate)))
        points.append(RatePoint(rate, plan, slo.met_by(plan.summary)))
    passing = [p.rate for p in points if p.meets_slo]
    return RateSweep(tuple(points), max(passing) if passing else None)


@dataclass(frozen=True, slots=True)
class ReplicaSearch:
    """The runs tried (by replica count), and the fewest replicas of the group that met the SLO."""

    group: str
    tried: tuple[tuple[int, FleetPlan, bool], ...]
    # None if even ``max_replicas`` did not.
    best_count: int | None


def replicas_for_slo(
    fleet: FleetSpec,
    workload: FleetWorkload,
    slo: Slo,
    *,
    group: str | None = None,
    max_replicas: int = 256,
    on_try: Callable[[int, FleetPlan, bool], None] | None = None,
) -> ReplicaSearch:
    """The smallest count of ``group``'s replicas (the fleet's only group by default) meeting ``slo``.

    Doubles the count until the SLO holds, then bisects between the last failure and the first
    success: latency falls as replicas are added, which the search relies on (each count tried is
    reported, so a non-monotone case shows).
    """
    if group is None:
        if len(fleet.groups) != 1:
            names = ", ".join(g.name for g in fleet.groups)
            raise ValueError(f"the fleet has several replica groups ({names}): name the one to vary")
        group = fleet.groups[0].name
    if max_replicas < 1:
        raise ValueError("max_replicas must be >= 1")
    others = fleet.num_replicas - next(g.count for g in fleet.groups if g.name == group)
    tried: dict[int, tuple[FleetPlan, bool]] = {}

    def attempt(count: int) -> bool:
        if count not in tried:
            plan = plan_fleet(fleet.with_count(group, count), workload)
            tried[count] = (plan, slo.met_by(plan.summary))
            if on_try is not None:
                on_try(count, plan, tried[count][1])
        return tried[count][1]

    lo = 1 if others == 0 else 0  # the fewest the search tries: a lone group needs one replica
    if attempt(lo):
        return ReplicaSearch(group, _ordered(tried), lo)
    hi = max(1, 2 * lo)
    while not attempt(hi):
        if hi >= max_replicas:
            return ReplicaSearch(group, _ordered(tried), None)
        lo, hi = hi, min(2 * hi, max_replicas)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if attempt(mid):
            hi = mid
        else:
            lo = mid
    return ReplicaSearch(group, _ordered(tried), hi)


def _ordered(tried: dict[int, tuple[FleetPlan, bool]]) -> tuple[tuple[int, FleetPlan, bool], ...]:
    return tuple((n, plan, ok) for n, (plan, ok) in sorted(tried.items()))
