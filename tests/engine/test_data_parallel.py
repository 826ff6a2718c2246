"""vLLM's internal data-parallel load balancing (``DPLBAsyncMPClient.get_core_engine_for_request``).

Expected ranks are worked out by hand from vLLM's rule: scan from a rotating start, score
``max(in_flight, waiting + running)`` plus ``waiting * 6 * max(0, kv_usage - 0.5)`` when waiting,
lowest strictly wins; the chosen rank's coordinator ``waiting`` goes up by one until the next
100 ms refresh.
"""

from __future__ import annotations

import pytest

from llmsim.engine.clock import MonotonicClock
from llmsim.engine.data_parallel import STATS_INTERVAL_S, DataParallelEngine, RankBalancer
from llmsim.engine.instant import InstantEngine
from llmsim.types import EngineSnapshot


class Ranks:
    """Live snapshots a test sets, and a clock it moves."""

    def __init__(self, n: int) -> None:
        self.snaps = [EngineSnapshot(0, 0, 0, 100) for _ in range(n)]
        self.t = 0.0

    def set(self, rank: int, running: int, waiting: int, used: int = 0) -> None:
        self.snaps[rank] = EngineSnapshot(running, waiting, used, 100)

    def balancer(self) -> RankBalancer:
        return RankBalancer([lambda r=r: self.snaps[r] for r in range(len(self.snaps))], lambda: self.t)  # type: ignore[misc]


def test_an_idle_server_spreads_a_burst_round_robin() -> None:
    # Between two coordinator refreshes only the local waiting counts move: 0, 1, 2, 3, 0, 1, ...
    ranks = Ranks(4)
    balancer = ranks.balancer()
    assert [balancer.pick() for _ in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_the_least_loaded_rank_wins() -> None:
    ranks = Ranks(3)
    ranks.set(0, running=3, waiting=0)
    ranks.set(1, running=1, waiting=0)
    ranks.set(2, running=2, waiting=0)
    assert ranks.balancer().pick() == 1


def test_waiting_requests_on_a_full_kv_cache_count_more() -> None:
    # Rank 0: 2 waiting at 100 % KV: 2 + 2 * 6 * 0.5 = 8. Rank 1: 5 running, none waiting: 5.
    ranks = Ranks(2)
    ranks.set(0, running=0, waiting=2, used=100)
    ranks.set(1, running=5, waiting=0)
    assert ranks.balancer().pick() == 1
    # At 50 % KV the penalty is off: 2 < 5.
    ranks.set(0, running=0, waiting=2, used=50)
    assert ranks.balancer().pick() == 0


def test_the_coordinators_figures_are_stale_until_the_next_refresh() -> None:
    ranks = Ranks(2)
    balancer = ranks.balancer()
    assert balancer.pick() == 0  # counts[0].waiting = 1, start = 1
    # Rank 1 fills up now, but the live in-flight count sees it: max(4, 0) = 4 > rank 0's 1.
    ranks.set(1, running=4, waiting=0)
    assert balancer.pick() == 0
    # Rank 1 drains; the coordinator still says rank 0 has 2 waiting until 100 ms have passed.
    ranks.set(1, running=0, waiting=0)
    assert balancer.pick() == 1
    ranks.t += STATS_INTERVAL_S
    # Refreshed from the live snapshots (all idle): the scan starts at 1 now.
    assert balancer.pick() == 1


def test_a_balancer_needs_a_rank() -> None:
    with pytest.raises(ValueError, match="at least one rank"):
        RankBalancer([], lambda: 0.0)


class Holding(InstantEngine):
    """A rank holding the blocks of the prefill legs it is given, until released."""

    def __init__(self, held: dict[str, tuple[int, ...]]) -> None:
        super().__init__(MonotonicClock())
        self.held = dict(held)

    def held_blocks(self, request_id: str) -> tuple[int, ...] | None:
        return self.held.get(request_id)

    def release_held(self, request_id: str) -> bool:
        return self.held.pop(request_id, None) is not None


def test_held_blocks_are_asked_of_and_freed_on_the_rank_holding_them() -> None:
    ranks = [Holding({"a": (1, 2)}), Holding({"b": (7,)})]
    engine = DataParallelEngine(ranks, MonotonicClock().now)
    assert (engine.holder("a"), engine.holder("b"), engine.holder("c")) == (0, 1, None)
    assert engine.held_blocks("b") == (7,)
    assert engine.held_blocks("c") is None
    assert engine.release_held("b")
    assert ranks[1].held == {}
    assert ranks[0].held == {"a": (1, 2)}
    assert not engine.release_held("b")
