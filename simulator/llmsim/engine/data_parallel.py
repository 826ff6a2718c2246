"""Which data-parallel rank serves a request: vLLM's internal load balancer, as one pure rule.

vLLM's API server in front of ``--data-parallel-size N`` ranks (``DPLBAsyncMPClient.
get_core_engine_for_request`` in ``vllm/v1/engine/core_client.py``) picks, for a request not pinned
by ``X-data-parallel-rank``, the rank with the lowest score, scanning from a start index that
moves on by one after every pick (ties go to the first rank scanned):

    score = max(client_count x in_flight, waiting + running)
            + waiting x 6 x max(0, kv_cache_usage - 0.5)     (only when waiting > 0)

``waiting``, ``running`` and ``kv_cache_usage`` are the coordinator's last snapshot of the rank
(published every 100 ms), with ``waiting`` raised by ``client_count`` for every request this API
server sent there since; ``in_flight`` is this API server's own count of its unfinished requests on
the rank (exact). The live server and the planner both route ranks with :class:`InternalLoadBalancer`;
they differ only in who feeds it snapshots and finishes.

Pure and deterministic: no clock (the caller says when a snapshot is taken), no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Seconds between two snapshots of the ranks' loads the coordinator publishes to the API server
#: (vLLM's DPCoordinator ``stats_update_interval_ms`` default).
STATS_UPDATE_INTERVAL = 0.1


@dataclass(slots=True)
class RankLoad:
    """One rank's load as the API server believes it (the coordinator's snapshot, plus its own sends)."""

    # Requests queued at the rank (vLLM's num_waiting_reqs), plus client_count per request sent since the snapshot.
    waiting: int = 0
    # Requests running on the rank (num_running_reqs).
    running: int = 0
    # Fraction of the rank's KV-cache blocks in use, 0..1.
    kv_cache_usage: float = 0.0


def rank_score(load: RankLoad, in_flight: int, client_count: int = 1) -> float:
    """vLLM's load estimate of one rank: the lower, the likelier to be picked."""
    score = float(max(client_count * in_flight, load.waiting + load.running))
    if load.waiting:
        # A queue on a rank short of KV drains slowly: penalised from 50 % usage up.
        score += load.waiting * 6.0 * max(0.0, load.kv_cache_usage - 0.5)
    return score


def choose_rank(loads: Sequence[RankLoad], in_flight: Sequence[int], start: int, client_count: int = 1) -> int:
    """The rank vLLM's internal load balancer picks: the lowest score, scanning from ``start``;
    the first scanned wins a tie."""
    n = len(loads)
    best = 0
    best_score = float("inf")
    for i in range(n):
        index = (start + i) % n
        score = rank_score(loads[index], in_flight[index], client_count)
        if score < best_score:
            best_score = score
            best = index
    return best


class InternalLoadBalancer:
    """One API server's view of its ranks and its picks (``DPLBAsyncMPClient``'s state).

    Parameters
    ----------
    size:
        Data-parallel ranks.
    client_index, client_count:
        This API server among ``client_count`` of them (vLLM's ``--api-server-count``); its scan
        starts at rank ``size x client_index // client_count``.
    """

    __slots__ = ("client_count", "in_flight", "loads", "start")

    def __init__(self, size: int, client_index: int = 0, client_count: int = 1) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if not 0 <= client_index < client_count:
            raise ValueError(f"client_index must be in [0, {client_count}), got {client_index}")
        self.client_count = client_count
        self.loads = [RankLoad() for _ in range(size)]
        self.in_flight = [0] * size
        self.start = size * client_index // client_count

    @property
    def size(self) -> int:
        return len(self.loads)

    def pick(self, pinned: int | None = None) -> int:
        """The rank for a new request (``pinned``: the request's ``X-data-parallel-rank``, taken as is).

        Raises ValueError for a pinned rank out of range (vLLM rejects it before routing).
        """
        if pinned is not None:
            if not 0 <= pinned < len(self.loads):
                raise ValueError(f"data parallel rank {pinned} out of range [0, {len(self.loads)})")
            rank = pinned
        else:
            rank = choose_rank(self.loads, self.in_flight, self.start, self.client_count)
            # Until the next snapshot, the request counts as waiting there.
            self.loads[rank].waiting += self.client_count
            # Equal scores (e.g. all idle) would otherwise always favour the same rank.
            self.start = (self.start + 1) % len(self.loads)
        self.in_flight[rank] += 1
        return rank

    def finished(self, rank: int) -> None:
        """A request this server sent to ``rank`` finished (or was aborted)."""
        self.in_flight[rank] -= 1

    def snapshot(self, rank: int, waiting: int, running: int, kv_cache_usage: float) -> None:
        """The coordinator's new figures for ``rank`` (they replace the local increments)."""
        load = self.loads[rank]
        load.waiting = waiting
        load.running = running
        load.kv_cache_usage = kv_cache_usage
