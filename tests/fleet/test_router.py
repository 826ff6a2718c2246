"""Routers over hand-made replica views: each policy's choice, worked out by hand."""

from __future__ import annotations

import random

import pytest

from llmsim.fleet import Prompt, RouterSpec, ScorerWeights, build_router
from llmsim.fleet.replica_view import ReplicaView


class View(ReplicaView):
    """A replica's scraped values given by hand, and a prefix cache that records its lookups."""

    def __init__(
        self, num_running: int = 0, num_waiting: int = 0, kv_usage: float = 0.0, block_size: int = 16, cached: int = 0
    ) -> None:
        super().__init__(block_size, num_running, num_waiting, kv_usage)
        self.cached = cached
        self.asked: list[Prompt] = []

    def cached_prefix_tokens(self, prompt: Prompt) -> int:
        self.asked.append(prompt)
        return min(self.cached, prompt.num_tokens)


PROMPT = Prompt.unique("p", 100)  # 6 full blocks of 16


def pick(policy: str, views: list[View], seed: int = 0, weights: ScorerWeights | None = None) -> int:
    spec = RouterSpec(policy, 0.0, weights or ScorerWeights(), seed)  # type: ignore[arg-type]
    replicas: list[ReplicaView] = list(views)
    return build_router(spec, replicas, random.Random(seed)).pick(PROMPT)


def test_round_robin_cycles_and_random_is_seeded() -> None:
    views: list[ReplicaView] = [View(), View(), View()]
    rr = build_router(RouterSpec("round-robin", 0.0), views, random.Random(0))
    assert [rr.pick(PROMPT) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    picks = [build_router(RouterSpec("random", 0.0), views, random.Random(7)).pick(PROMPT) for _ in range(2)]
    assert picks[0] == picks[1]
    rnd = build_router(RouterSpec("random", 0.0), views, random.Random(7))
    assert {rnd.pick(PROMPT) for _ in range(100)} == {0, 1, 2}


def test_least_requests_counts_running_and_waiting() -> None:
    assert pick("least-requests", [View(3, 0), View(1, 1), View(0, 4)]) == 1


def test_ties_are_broken_at_random_not_by_position() -> None:
    views = [View(2, 0), View(1, 0), View(1, 0), View(1, 0)]
    assert {pick("least-requests", views, seed) for seed in range(40)} == {1, 2, 3}


def test_least_kv_reads_usage() -> None:
    assert pick("least-kv", [View(kv_usage=0.5), View(kv_usage=0.2), View(0, 9, kv_usage=0.3)]) == 1


def test_prefix_affinity_prefers_the_longest_cached_prefix_then_load() -> None:
    views = [View(0, 0, cached=0), View(5, 0, cached=64), View(2, 0, cached=64)]
    assert pick("prefix-affinity", views) == 2
    assert all(v.asked == [PROMPT] for v in views)
    # No prefix anywhere: load decides.
    assert pick("prefix-affinity", [View(3), View(1), View(2)]) == 1


def test_weighted_sums_the_inference_extension_scores() -> None:
    # waiting [0, 4, 2] -> queue (4-w)/4: 1, 0, 0.5; kv 1-usage: 0.5, 0.9, 0.1; prefix 0.
    # 2*1 + 2*0.5 = 3.0; 2*0 + 2*0.9 = 1.8; 2*0.5 + 2*0.1 = 1.2 -> replica 0.
    views = [View(0, 0, 0.5), View(0, 4, 0.1), View(0, 2, 0.9)]
    assert pick("weighted", views) == 0
    # Weight KV alone: replica 1.
    assert pick("weighted", views, weights=ScorerWeights(queue=0, kv_cache=1, prefix=0)) == 1


def test_weighted_prefix_score_is_matched_over_total_full_blocks() -> None:
    # 100 tokens = 6 full blocks of 16. Replica 0: queue 1 (3-0)/3, kv 1, prefix 0: 2 + 2 = 4.
    # Replica 1: queue 0, kv 0.5, 64 tokens cached = 4 of 6 blocks: 2*0.5 + 3*4/6 = 3.
    # With 96 cached (6 of 6 blocks) replica 1 scores 1 + 3 = 4: a tie, broken at random.
    views = [View(0, 0, 0.0, cached=0), View(0, 3, 0.5, cached=64)]
    assert pick("weighted", views) == 0
    tie = [View(0, 0, 0.0, cached=0), View(0, 3, 0.5, cached=96)]
    assert {pick("weighted", tie, seed) for seed in range(40)} == {0, 1}
    # A prompt shorter than one block scores 0 on prefix whatever is cached.
    short = Prompt.unique("s", 10)
    spec = RouterSpec("weighted", 0.0)
    router = build_router(spec, [View(0, 1, 0.0, cached=10), View(0, 0, 0.0)], random.Random(0))
    assert router.pick(short) == 1


def test_an_unknown_router_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown router 'fastest'"):
        RouterSpec("fastest")  # type: ignore[arg-type]
