"""A fleet as plain numbers: replica groups (scheduler parameters and a count) behind one router.

``fleet_file`` builds one from a fleet YAML and a models.yml; tests and other tools build one
directly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from llmsim.engine.scheduler.kv_link import KVLinkSpec
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

#: A replica's part in a disaggregated fleet (models.yml's kv_transfer.kv_role).
KVRole = Literal["kv_producer", "kv_consumer", "kv_both"]


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
    # Whether the router sees each data-parallel rank as an endpoint of its own and pins requests
    # to it (vllm-router's --intra-node-data-parallel-size, sglang-router's --dp-aware); False: it
    # sees one endpoint per replica, and the replica's API server picks the rank (vLLM's internal LB).
    dp_aware: bool = False
    # A disaggregated fleet's two picks (vllm-router's --prefill-policy and --decode-policy):
    # which prefill replica, then which decode replica; None: ``policy``.
    prefill_policy: RouterPolicy | None = None
    decode_policy: RouterPolicy | None = None
    # Seconds from a prefill leg's last token to its decode leg's arrival at the decode replica: the
    # proxy reads the prefill answer, picks a decode replica and sends the decode leg (vllm-router:
    # a few ms). 0: at once.
    handoff: float = 0.0

    def __post_init__(self) -> None:
        for policy in (self.policy, self.prefill_policy or self.policy, self.decode_policy or self.policy):
            if policy not in ROUTER_POLICIES:
                raise ValueError(f"unknown router '{policy}' (routers: {', '.join(ROUTER_POLICIES)})")
        if self.scrape_interval < 0:
            raise ValueError(f"scrape_interval must be >= 0, got {self.scrape_interval}")
        if not 0 <= self.handoff < float("inf"):
            raise ValueError(f"handoff must be >= 0 and finite, got {self.handoff}")

    @property
    def prefill(self) -> RouterPolicy:
        """The policy that picks a prefill replica (disaggregated fleets)."""
        return self.prefill_policy or self.policy

    @property
    def decode(self) -> RouterPolicy:
        """The policy that picks a decode replica (disaggregated fleets)."""
        return self.decode_policy or self.policy

    def for_prefill(self) -> RouterSpec:
        """This router's prefill pick as a router of its own (same view, weights and seed)."""
        return dataclasses.replace(self, policy=self.prefill, prefill_policy=None, decode_policy=None)

    def for_decode(self) -> RouterSpec:
        """This router's decode pick as a router of its own (its random draws apart from the prefill pick's)."""
        return dataclasses.replace(
            self, policy=self.decode, prefill_policy=None, decode_policy=None, seed=self.seed + 1_000_003
        )


@dataclass(frozen=True, slots=True)
class ReplicaGroup:
    """``count`` identical replicas of one model."""

    name: str
    # The models.yml model the replicas serve (for reports).
    model: str
    params: SchedulerParams
    count: int = 1

    # Data-parallel ranks of each replica (models.yml's data_parallel.size): each rank is a
    # simulated GPU of its own, with ``params``.
    data_parallel: int = 1
    # True: each rank listens on a port of its own (data_parallel.load_balancing: external), so a
    # router always sees ranks; False: one port, the replica's API server balances its ranks.
    external_lb: bool = False
    # Its part in a disaggregated fleet (None: it serves whole requests).
    kv_role: KVRole | None = None
    # The link a pull into one of its GPUs crosses (models.yml's kv_transfer bandwidth and latency).
    kv_link: KVLinkSpec | None = None
    # Seconds a prefill replica holds a request's blocks for a pull that never comes.
    kv_abort_timeout: float = 480.0

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"replica group '{self.name}': count must be >= 0, got {self.count}")
        if self.data_parallel < 1:
            raise ValueError(f"replica group '{self.name}': data_parallel must be >= 1, got {self.data_parallel}")

    @property
    def num_gpus(self) -> int:
        """Simulated GPUs of the group: replicas x data-parallel ranks."""
        return self.count * self.data_parallel

    def balances_ranks(self, router: RouterSpec) -> bool:
        """Whether each replica's own API server picks its rank (vLLM's internal load balancer)."""
        return self.data_parallel > 1 and not self.external_lb and not router.dp_aware


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
        roles = {g.kv_role for g in self.groups if g.count}
        if roles - {None}:
            if "kv_both" in roles:
                raise ValueError("kv_both replicas are not planned yet: give each group kv_producer or kv_consumer")
            if roles != {"kv_producer", "kv_consumer"}:
                raise ValueError(
                    "a disaggregated fleet needs kv_producer (prefill) and kv_consumer (decode) replicas, and only those"
                )

    @property
    def disaggregated(self) -> bool:
        """Whether requests are prefilled on kv_producer replicas and decoded on kv_consumer ones."""
        return any(g.count and g.kv_role is not None for g in self.groups)

    def aggregated(self) -> FleetSpec:
        """The same GPUs, each serving whole requests (no kv_transfer), behind ``router.policy``."""
        groups = tuple(
            dataclasses.replace(g, params=dataclasses.replace(g.params, kv_link=None), kv_role=None, kv_link=None)
            for g in self.groups
        )
        return FleetSpec(groups, dataclasses.replace(self.router, prefill_policy=None, decode_policy=None))

    @property
    def num_replicas(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def num_gpus(self) -> int:
        """Simulated GPUs: every data-parallel rank of every replica."""
        return sum(g.num_gpus for g in self.groups)

    @property
    def has_data_parallel(self) -> bool:
        return any(g.count and g.data_parallel > 1 for g in self.groups)

    def replica_names(self) -> list[str]:
        """``<group>/<k>`` for every replica, in order."""
        return [f"{g.name}/{k}" for g in self.groups for k in range(g.count)]

    def gpu_names(self) -> list[str]:
        """``<group>/<k>`` for every simulated GPU, ``<group>/<k>/<rank>`` for data-parallel ranks."""
        return [
            f"{g.name}/{k}" if g.data_parallel == 1 else f"{g.name}/{k}/{r}"
            for g in self.groups
            for k in range(g.count)
            for r in range(g.data_parallel)
        ]

    def with_router(self, policy: RouterPolicy, *, dp_aware: bool | None = None) -> FleetSpec:
        """The same replicas behind ``policy`` (both picks of a disaggregated fleet)."""
        aware = self.router.dp_aware if dp_aware is None else dp_aware
        router = dataclasses.replace(
            self.router, policy=policy, dp_aware=aware, prefill_policy=None, decode_policy=None
        )
        return FleetSpec(self.groups, router)

    def with_count(self, group: str, count: int) -> FleetSpec:
        """The same fleet with ``count`` replicas in ``group``."""
        if group not in {g.name for g in self.groups}:
            raise ValueError(f"no replica group '{group}' (groups: {', '.join(g.name for g in self.groups)})")
        groups = tuple(dataclasses.replace(g, count=count) if g.name == group else g for g in self.groups)
        return FleetSpec(groups, self.router)
