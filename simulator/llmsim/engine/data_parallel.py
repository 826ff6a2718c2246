"""Data-parallel ranks behind one API server: N engines, and vLLM's choice of rank per request.

vLLM's internal load balancing (``--data-parallel-size N``, one API port) lives in the API
server's engine client, ``DPLBAsyncMPClient.get_core_engine_for_request``
(``vllm/v1/engine/core_client.py``). For a request not pinned to a rank it scans the engines,
starting at a rotating index, and takes the lowest score::

    score = max(client_count * in_flight, waiting + running)
    if waiting: score += waiting * 6 * max(0, kv_cache_usage - 0.5)

``in_flight`` is this client's own count of the engine's unfinished requests (exact);
``waiting``, ``running`` and ``kv_cache_usage`` come from the DP coordinator, which publishes them
every 100 ms; between two publications the client adds ``client_count`` to the chosen engine's
``waiting``, so a burst spreads out. A pinned request (``X-data-parallel-rank``) goes to its
rank and moves none of that state but ``in_flight``.

Here one API server is the only client (``client_count`` 1), so ``in_flight`` is the rank's live
running + waiting count; the coordinator's figures are a copy of the ranks' snapshots refreshed at
most every :data:`STATS_INTERVAL_S` of engine time, as vLLM's go stale.

NOTE: vLLM routes each of a request's ``n`` choices on its own (a parent request fans out into
child requests); here every choice of a request goes to one rank, so its admission stays one
decision (all choices or none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llmsim.engine.base import Engine, TokenStream
from llmsim.types import EngineSnapshot, GenerationPlan, RequestId

__all__ = ["STATS_INTERVAL_S", "DataParallelEngine", "RankBalancer"]

#: vLLM's DP coordinator publishes the engines' queue counts this often (its stats_update_interval_ms).
STATS_INTERVAL_S = 0.1
#: Waiting requests on a KV-bound rank count up to this many times more (vLLM: 0 at <= 50 % KV usage, 3x at 100 %).
_KV_PENALTY = 6.0


class RankBalancer:
    """vLLM's internal DP load balancing over ``snapshots`` (one per rank, read live).

    Parameters
    ----------
    snapshots:
        Each rank's live snapshot, in rank order.
    now:
        The engine clock; the coordinator's copy of the counts refreshes when
        :data:`STATS_INTERVAL_S` of it has passed.
    """

    __slots__ = ("_counts", "_now", "_refreshed", "_snapshots", "_start")

    def __init__(self, snapshots: Sequence[Callable[[], EngineSnapshot]], now: Callable[[], float]) -> None:
        if not snapshots:
            raise ValueError("a data-parallel engine needs at least one rank")
        self._snapshots = tuple(snapshots)
        self._now = now
        # The coordinator's last figures per rank: [waiting, running, kv usage] (waiting moves locally).
        self._counts: list[list[float]] = [[0, 0, 0.0] for _ in self._snapshots]
        self._refreshed = float("-inf")
        # vLLM: client_index * engines // client_count, 0 for the one API server, then rotated per pick.
        self._start = 0

    def _refresh(self) -> None:
        now = self._now()
        if now - self._refreshed < STATS_INTERVAL_S:
            return
        self._refreshed = now
        for counts, snapshot in zip(self._counts, self._snapshots, strict=True):
            snap = snapshot()
            usage = snap.kv_used_blocks / snap.kv_total_blocks if snap.kv_total_blocks else 0.0
            counts[0], counts[1], counts[2] = snap.num_waiting, snap.num_running, usage

    def pick(self) -> int:
        """The rank vLLM's API server would send an unpinned request to now (and note it was sent)."""
        self._refresh()
        num = len(self._snapshots)
        best = 0
        best_score = float("inf")
        for i in range(num):
            idx = (self._start + i) % num
            waiting, running, usage = self._counts[idx]
            live = self._snapshots[idx]()
            score = max(float(live.num_running + live.num_waiting), waiting + running)
            if waiting:
                score += waiting * _KV_PENALTY * max(0.0, usage - 0.5)
            if score < best_score:
                best_score = score
                best = idx
        self._counts[best][0] += 1
        # vLLM rotates the scan's start so that ties do not always favour the same rank.
        self._start = (self._start + 1) % num
        return best


class DataParallelEngine(Engine):
    """Several engines (the ranks, in rank order) as one: requests go to the rank vLLM would pick.

    Everything else fans out: start, stop, abort, LoRA loads, prefix-cache resets; the snapshot is
    the ranks' sum (what a server-wide load figure reports). Blocks a prefill leg holds for a pull
    (disaggregated prefill/decode) are asked of, and freed on, the rank that holds them.
    """

    name = "data_parallel"

    def __init__(self, ranks: Sequence[Engine], now: Callable[[], float]) -> None:
        self.ranks = tuple(ranks)
        self.balancer = RankBalancer([r.snapshot for r in self.ranks], now)

    @property
    def size(self) -> int:
        return len(self.ranks)

    async def start(self) -> None:
        for rank in self.ranks:
            await rank.start()

    async def stop(self) -> None:
        for rank in self.ranks:
            await rank.stop()

    def abort_requests(self) -> int:
        return sum(rank.abort_requests() for rank in self.ranks)

    async def submit(
        self, plans: Sequence[GenerationPlan], arrival: float, request_ids: Sequence[RequestId]
    ) -> list[TokenStream]:
        return await self.ranks[self.balancer.pick()].submit(plans, arrival, request_ids)

    async def submit_to(
        self, rank: int, plans: Sequence[GenerationPlan], arrival: float, request_ids: Sequence[RequestId]
    ) -> list[TokenStream]:
        """Admit a request pinned to ``rank`` (0 <= rank < size; the API checks it)."""
        return await self.ranks[rank].submit(plans, arrival, request_ids)

    def snapshot(self) -> EngineSnapshot:
        snaps = [rank.snapshot() for rank in self.ranks]
        return EngineSnapshot(
            num_running=sum(s.num_running for s in snaps),
            num_waiting=sum(s.num_waiting for s in snaps),
            kv_used_blocks=sum(s.kv_used_blocks for s in snaps),
            kv_total_blocks=sum(s.kv_total_blocks for s in snaps),
            running_lora_adapters=tuple(dict.fromkeys(a for s in snaps for a in s.running_lora_adapters)),
            waiting_lora_adapters=tuple(dict.fromkeys(a for s in snaps for a in s.waiting_lora_adapters)),
        )

    def add_lora(self, name: str, path: str) -> None:
        for rank in self.ranks:
            rank.add_lora(name, path)

    def remove_lora(self, name: str) -> None:
        for rank in self.ranks:
            rank.remove_lora(name)

    def reset_prefix_cache(self) -> bool:
        # Every rank is asked, as vLLM's utility call goes to every engine.
        results = [rank.reset_prefix_cache() for rank in self.ranks]
        return all(results)

    def holder(self, request_id: str) -> int | None:
        """Which rank (index into :attr:`ranks`) holds prefill leg ``request_id``'s blocks, if any.

        Request ids are unique across the server, so at most one rank holds them; the prefill
        answer names that rank's engine id and side channel (vLLM: each rank is its own engine).
        """
        return next((i for i, rank in enumerate(self.ranks) if rank.held_blocks(request_id) is not None), None)

    def held_blocks(self, request_id: str) -> tuple[int, ...] | None:
        index = self.holder(request_id)
        return self.ranks[index].held_blocks(request_id) if index is not None else None

    def release_held(self, request_id: str) -> bool:
        index = self.holder(request_id)
        return self.ranks[index].release_held(request_id) if index is not None else False
