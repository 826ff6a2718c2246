"""Fleets in virtual time: replicas of the scheduler engine behind a router, fed by a workload.

The core (``prompt``, ``workload``, ``spec``, ``replica``, ``router``, ``simulation``, results,
``planner``, ``report``) is pure and deterministic like the scheduler it steps: no clock, no
asyncio, no I/O, randomness only from seeds. ``fleet_file`` and ``trace_file`` read the YAML and
JSON-lines files at the edge, with one-line errors naming file, entry and field.

Entry point for other tools: ``plan_fleet(load_fleet(...), workload)``; one replica with every
step recorded: ``simulate(params, items)``. This is llmsim's one virtual-time engine.
"""

from llmsim.fleet.fleet_file import load_fleet, parse_fleet
from llmsim.fleet.fleet_result import FleetResult, ReplicaReport, RequestOutcome
from llmsim.fleet.fleet_summary import FleetSummary, Latencies, OrderedCounts, ReplicaSummary, counted_percentiles
from llmsim.fleet.planner import (
    FleetPlan,
    RatePoint,
    RateSweep,
    ReplicaSearch,
    Slo,
    SloTarget,
    compare_routers,
    plan_fleet,
    replicas_for_slo,
    sweep_rates,
)
from llmsim.fleet.prompt import Prompt, Segment
from llmsim.fleet.replica import Replica
from llmsim.fleet.replica_view import ReplicaView
from llmsim.fleet.router import Router, build_router
from llmsim.fleet.simulation import FleetSimulation, simulate, simulate_fleet
from llmsim.fleet.spec import ROUTER_POLICIES, FleetSpec, ReplicaGroup, RouterPolicy, RouterSpec, ScorerWeights
from llmsim.fleet.trace_file import load_trace, parse_trace
from llmsim.fleet.workload import (
    ARRIVAL_PATTERNS,
    FleetRequest,
    FleetWorkload,
    WorkloadShape,
    closed_loop,
    generate,
    poisson_arrivals,
    poisson_workload,
)

__all__ = [
    "ARRIVAL_PATTERNS",
    "ROUTER_POLICIES",
    "FleetPlan",
    "FleetRequest",
    "FleetResult",
    "FleetSimulation",
    "FleetSpec",
    "FleetSummary",
    "FleetWorkload",
    "Latencies",
    "OrderedCounts",
    "Prompt",
    "RatePoint",
    "RateSweep",
    "Replica",
    "ReplicaGroup",
    "ReplicaReport",
    "ReplicaSearch",
    "ReplicaSummary",
    "ReplicaView",
    "RequestOutcome",
    "Router",
    "RouterPolicy",
    "RouterSpec",
    "ScorerWeights",
    "Segment",
    "Slo",
    "SloTarget",
    "WorkloadShape",
    "build_router",
    "closed_loop",
    "compare_routers",
    "counted_percentiles",
    "generate",
    "load_fleet",
    "load_trace",
    "parse_fleet",
    "parse_trace",
    "plan_fleet",
    "poisson_arrivals",
    "poisson_workload",
    "replicas_for_slo",
    "simulate",
    "simulate_fleet",
    "sweep_rates",
]
