"""A fleet as plain numbers: replica groups (scheduler parameters and a count) behind one router.

``fleet_file`` builds one from a fleet YAML and a models.yml; tests and other tools build one
directly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from llmsim.engine.scheduler.params import SchedulerParams

RouterPolicy = Literal["round-robin", "random", "least-requests", "least-kv", "prefix-affinity", "weighted"]
#: Every router name, as users write it on the command line and in fleet files.
ROUTER_POLICIES: tuple[RouterPolicy, ...] = (
    "round-robin",
    "random",
    "least-requests",
    "least-kv",
    "prefix-affinity",
    "weighted",
)


@dataclass(frozen=True, slots=True)
class ScorerWeights:
    """Weights of the ``weighted`` router's scorers; the default is the Gateway API Inference
    Extension's default profile (queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3)."""

    queue: float = 2.0
    kv_cache: float = 2.0
    prefix: float = 3.0

    def __post_init__(self) -> None:
        for name in ("queue", "kv_cache", "prefix"):
            if getattr(self, name) < 0:
                raise ValueError(f"weight {name} must be >= 0")


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """Which router, and how fresh its view of the replicas is."""

    policy: RouterPolicy = "least-requests"
    # Seconds between two scrapes of a replica's metrics (each replica on its own phase, as the
    # endpoint picker runs one collector per pod: replica i first at i/N of an interval); 0: the
    # router sees every replica's live state.
    scrape_interval: float = 0.05
    weights: ScorerWeights = ScorerWeights()
    # Seeds the random router and every tie-break.
    seed: int = 0

    def __post_init__(self) -> None:
        if self.policy not in ROUTER_POLICIES:
            raise ValueError(f"unknown router '{self.policy}' (routers: {', '.join(ROUTER_POLICIES)})")
        if self.scrape_interval < 0:
            raise ValueError(f"scrape_interval must be >= 0, got {self.scrape_interval}")


@dataclass(frozen=True, slots=True)
class ReplicaGroup:
    """``count`` identical replicas of one model."""

    name: str
    # The models.yml model the replicas serve (for reports).
    model: str
    params: SchedulerParams
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"replica group '{self.name}': count must be >= 0, got {self.count}")


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """Replica groups behind a router."""

    groups: tuple[ReplicaGroup, ...]
    router: RouterSpec = RouterSpec()

    def __post_init__(self) -> None:
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names):
            raise ValueError(f"replica group names must be unique, got {names}")
        if self.num_replicas < 1:
            raise ValueError("a fleet needs at least one replica")

    @property
    def num_replicas(self) -> int:
        return sum(g.count for g in self.groups)

    def replica_names(self) -> list[str]:
        """``<group>/<k>`` for every replica, in order."""
        return [f"{g.name}/{k}" for g in self.groups for k in range(g.count)]

    def with_router(self, policy: RouterPolicy) -> FleetSpec:
        return FleetSpec(self.groups, dataclasses.replace(self.router, policy=policy))

    def with_count(self, group: str, count: int) -> FleetSpec:
        """The same fleet with ``count`` replicas in ``group``."""
        if group not in {g.name for g in self.groups}:
            raise ValueError(f"no replica group '{group}' (groups: {', '.join(g.name for g in self.groups)})")
        groups = tuple(dataclasses.replace(g, count=count) if g.name == group else g for g in self.groups)
        return FleetSpec(groups, self.router)
