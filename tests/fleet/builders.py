"""Fleets of the tiny and seed-design scheduler configs (see tests/engine/scheduler/builders.py)."""

from __future__ import annotations

from llmsim.engine.scheduler import SchedulerParams
from llmsim.fleet import FleetRequest, FleetSpec, FleetWorkload, Prompt, ReplicaGroup, RouterSpec
from llmsim.fleet.spec import RouterPolicy


def fleet_of(
    params: SchedulerParams, count: int, policy: RouterPolicy = "round-robin", *, scrape: float = 0.0, seed: int = 0
) -> FleetSpec:
    return FleetSpec((ReplicaGroup("r", "m", params, count),), RouterSpec(policy, scrape, seed=seed))


def request(i: int, arrival: float, prompt: int, output: int, **kw: object) -> FleetRequest:
    return FleetRequest(Prompt.unique(f"request:{i}", prompt), output, arrival, **kw)  # type: ignore[arg-type]


def workload(*shapes: tuple[float, int, int]) -> FleetWorkload:
    """Requests given as (arrival, prompt tokens, output tokens)."""
    return FleetWorkload(tuple(request(i, a, p, o) for i, (a, p, o) in enumerate(shapes)))
