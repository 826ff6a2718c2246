"""A data-parallel replica behind one port: its ranks, and vLLM's internal load balancer over them.

A router that does not see ranks sees one endpoint per replica; its ``/metrics`` carries a series
per rank (``engine="<rank>"``), which this view adds up: requests running and waiting summed,
KV-cache usage the mean over the ranks, and the longest cached prefix any rank holds (a precise
prefix-cache scorer indexes every rank's KV events under the pod).

The rank is then the API server's choice (:class:`~llmsim.engine.data_parallel.InternalLoadBalancer`,
vLLM's rule). Its snapshots of the ranks' loads come from the coordinator every
:data:`~llmsim.engine.data_parallel.STATS_UPDATE_INTERVAL`; NOTE: here a snapshot is taken at the
first request routed at or after each tick, of the ranks' state then, rather than at the tick
(the same cadence, a few milliseconds fresher), so an idle replica costs nothing between requests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llmsim.engine.data_parallel import STATS_UPDATE_INTERVAL, InternalLoadBalancer
from llmsim.fleet.prompt import Prompt
from llmsim.fleet.replica import Replica
from llmsim.fleet.replica_view import ReplicaView


class DataParallelServer(ReplicaView):
    """The ranks of one replica as one endpoint, and the rank choice of its API server."""

    __slots__ = ("balancer", "next_snapshot", "ranks")

    def __init__(self, ranks: Sequence[Replica]) -> None:
        super().__init__(ranks[0].block_size)
        self.ranks = list(ranks)
        self.balancer = InternalLoadBalancer(len(self.ranks))
        self.next_snapshot = 0.0

    def refresh(self) -> None:
        """Sum the ranks' scraped figures (after the fleet brought each rank's view to now)."""
        running = waiting = 0
        kv = 0.0
        for rank in self.ranks:
            running += rank.num_running
            waiting += rank.num_waiting
            kv += rank.kv_usage
        self.num_running = running
        self.num_waiting = waiting
        self.kv_usage = kv / len(self.ranks)

    def cached_prefix_tokens(self, prompt: Prompt) -> int:
        return max(rank.cached_prefix_tokens(prompt) for rank in self.ranks)

    def pick(self, now: float, passed: Sequence[bool]) -> int:
        """The rank (0-based, within this replica) the API server sends a request to at ``now``;
        ``passed[r]``: whether rank ``r``'s step starting now has started (see ``FleetSimulation``)."""
        balancer = self.balancer
        if now >= self.next_snapshot:
            for r, rank in enumerate(self.ranks):
                waiting, running, kv = rank.live_load(now, passed[r])
                balancer.snapshot(r, waiting, running, kv)
            # The next tick after now, computed from its index (float rounding either way).
            tick = math.floor(now / STATS_UPDATE_INTERVAL) + 1
            while tick * STATS_UPDATE_INTERVAL <= now:
                tick += 1
            self.next_snapshot = tick * STATS_UPDATE_INTERVAL
        return balancer.pick()

    def finished(self, rank: int) -> None:
        self.balancer.finished(rank)
