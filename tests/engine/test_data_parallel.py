"""vLLM's internal data-parallel load balancer (``DPLBAsyncMPClient.get_core_engine_for_request``),
with expected ranks worked out by hand from its rule."""

from __future__ import annotations

import pytest

from llmsim.engine.data_parallel import InternalLoadBalancer, RankLoad, choose_rank, rank_score


def test_score_is_the_larger_of_own_in_flight_and_the_snapshot() -> None:
    assert rank_score(RankLoad(0, 3, 0.0), in_flight=5) == 5.0
    assert rank_score(RankLoad(1, 3, 0.0), in_flight=2) == 4.0
    # Two API servers: each in-flight request stands for two.
    assert rank_score(RankLoad(0, 1, 0.0), in_flight=2, client_count=2) == 4.0


def test_waiting_is_penalised_above_half_kv_usage() -> None:
    # 2 waiting, 90 % KV: 2 + 3 running = 5, + 2 x 6 x 0.4 = 4.8.
    assert rank_score(RankLoad(2, 3, 0.9), in_flight=0) == pytest.approx(9.8)
    # At or under 50 %, or with nobody waiting, no penalty.
    assert rank_score(RankLoad(2, 3, 0.5), in_flight=0) == 5.0
    assert rank_score(RankLoad(0, 3, 1.0), in_flight=0) == 3.0


def test_lowest_score_wins_and_ties_go_to_the_first_scanned() -> None:
    idle = [RankLoad(), RankLoad(), RankLoad()]
    assert choose_rank(idle, [0, 0, 0], start=0) == 0
    assert choose_rank(idle, [0, 0, 0], start=2) == 2
    # Rank 0: 3 + 1 x 6 x 0.4 = 5.4; rank 1: 4; rank 2: 4 (scanned after rank 1).
    loads = [RankLoad(1, 2, 0.9), RankLoad(0, 4, 0.0), RankLoad(4, 0, 0.0)]
    assert choose_rank(loads, [0, 0, 0], start=0) == 1
    assert choose_rank(loads, [0, 0, 0], start=2) == 2
    # The exact in-flight count outweighs a stale empty snapshot.
    assert choose_rank(idle, [2, 1, 3], start=0) == 1


def test_a_burst_between_snapshots_goes_round_the_ranks() -> None:
    lb = InternalLoadBalancer(4)
    assert [lb.pick() for _ in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [load.waiting for load in lb.loads] == [2, 2, 2, 2]
    assert lb.in_flight == [2, 2, 2, 2]


def test_finishes_and_snapshots_steer_the_next_pick() -> None:
    lb = InternalLoadBalancer(2)
    assert lb.pick() == 0
    assert lb.pick() == 1
    lb.finished(1)
    # The snapshot still counts rank 1's request as waiting: scores 1 and 1, scan from rank 0.
    assert lb.pick() == 0
    lb.snapshot(0, 0, 2, 0.0)
    lb.snapshot(1, 0, 0, 0.0)
    # Scan from rank 1: rank 1 scores 0.
    assert lb.pick() == 1


def test_a_pinned_request_moves_neither_the_scan_nor_the_waiting_count() -> None:
    lb = InternalLoadBalancer(3)
    assert lb.pick(pinned=2) == 2
    assert lb.start == 0
    assert lb.loads[2].waiting == 0
    assert lb.in_flight == [0, 0, 1]
    # Rank 2 has one in flight: the next two go to 0 and 1.
    assert [lb.pick(), lb.pick()] == [0, 1]
    with pytest.raises(ValueError, match="out of range"):
        lb.pick(pinned=3)


def test_api_servers_start_their_scans_apart() -> None:
    assert InternalLoadBalancer(4, client_index=1, client_count=2).start == 2
    assert InternalLoadBalancer(4, client_index=1, client_count=2).pick() == 2
