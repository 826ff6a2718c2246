"""A data-parallel replica behind one port: its ranks, and vLLM's internal load balancer over them.

A router that does not see ranks sees one endpoint per replica; its ``/metrics`` carries a series
per rank (``engine="<rank>"``), which this view adds up: requests running and waiting summed,
KV-cache usage the mean over the ranks, and the longest cached prefix any rank holds (a precise
prefix-cache scorer indexes every rank's KV events under the pod).

The rank is then the API server's choice: :class:`~llmsim.engine.data_parallel.RankBalancer`, the
rule the live server uses, fed the ranks' live figures at the fleet's current instant.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmsim.engine.data_parallel import RankBalancer
from llmsim.fleet.prompt import Prompt
from llmsim.fleet.replica import Replica
from llmsim.fleet.replica_view import ReplicaView
from llmsim.types import EngineSnapshot


class DataParallelServer(ReplicaView):
    """The ranks of one replica as one endpoint, and the rank choice of its API server."""

    __slots__ = ("_now", "_passed", "balancer", "ranks")

    def __init__(self, ranks: Sequence[Replica]) -> None:
        super().__init__(ranks[0].block_size)
        self.ranks = list(ranks)
        # The fleet's instant, and whether each rank's step starting then has started (set by pick).
        self._now = 0.0
        self._passed: Sequence[bool] = [False] * len(self.ranks)
        self.balancer = RankBalancer([self._reader(r) for r in range(len(self.ranks))], self._clock)

    def _clock(self) -> float:
        return self._now

    def _reader(self, r: int) -> _RankReader:
        return _RankReader(self, r)

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
        self._now = now
        self._passed = passed
        return self.balancer.pick()


class _RankReader:
    """One rank's live figures at the server's current instant (the balancer's snapshot callable)."""

    __slots__ = ("rank", "server")

    def __init__(self, server: DataParallelServer, rank: int) -> None:
        self.server = server
        self.rank = rank

    def __call__(self) -> EngineSnapshot:
        server = self.server
        return server.ranks[self.rank].live_snapshot(server._now, server._passed[self.rank])
