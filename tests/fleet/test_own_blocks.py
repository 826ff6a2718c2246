"""Blocks no other request can hit stay out of the prefix cache's map until their request is
preempted (``FleetWorkload.own_text_starts``, ``Sequence.num_shareable_blocks``): the fleet's
results are exactly those of mapping every block as it fills."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, target

from llmsim.engine.scheduler.kv_cache import KVCache
from llmsim.engine.scheduler.sequence import Sequence
from llmsim.fleet import FleetRequest, FleetSpec, FleetWorkload, Prompt, ReplicaGroup, RouterSpec, Segment
from llmsim.fleet.simulation import FleetSimulation
from llmsim.types import RequestId
from tests.engine.scheduler.builders import tiny_params
from tests.fleet.test_fast_forward import everything, fleets


def test_a_request_s_own_text_starts_at_the_first_key_no_other_request_names() -> None:
    system = Segment("system", 100)
    answer_a = Segment("answer:a", 20)
    a = FleetRequest(Prompt((system, Segment("own:a", 50))), 20, answer=answer_a)
    b = FleetRequest(Prompt((system, Segment("own:b", 30))), 5)
    alone = FleetRequest(Prompt.unique("alone", 40), 5)
    # The next turn of a: it quotes a's prompt and answer, so none of a's text is a's alone.
    turn = FleetRequest(Prompt((system, Segment("own:a", 50), answer_a, Segment("own:e", 7))), 5, 1.0, follows=0)
    # Explicit ids are content, whatever their key: never judged, the next key decides.
    ids = FleetRequest(Prompt((Segment("ids:x", 3, (1, 2, 3)), Segment("own:i", 9))), 5)
    empty = FleetRequest(Prompt((Segment("nothing", 0), Segment("system", 100))), 5)
    starts = FleetWorkload((a, b, alone, turn, ids, empty)).own_text_starts()
    # a: system (4 holders), own:a (a and the turn), answer:a (a's answer, the turn's prompt).
    # b: own:b after the 100 system tokens. turn: own:e after 100 + 50 + 20.
    assert starts == [None, 100, 0, 170, 3, None]


def test_a_block_past_the_shareable_ones_counts_as_cached_but_is_mapped_only_on_preemption() -> None:
    kv = KVCache(16, 4, enable_caching=True)
    seq = Sequence(RequestId("r"), 0.0, 12, 4, block_hashes=[101, 102, 103])
    seq.num_shareable_blocks = 1
    assert kv.allocate_slots(seq, 12)
    kv.cache_blocks(seq, 12)
    assert seq.num_cached_blocks == 3
    assert kv.count_cached_prefix([101, 102, 103]) == 1
    kv.audit([seq])
    # Preempted: the blocks it alone holds become findable, for it to hit when it comes back.
    kv.free(seq, preempted=True)
    assert kv.count_cached_prefix([101, 102, 103]) == 3
    kv.audit([])
    # Freed at its end (never back): they go back as cached blocks, at the tail, still unmapped.
    other = Sequence(RequestId("o"), 0.0, 12, 4, block_hashes=[201, 202, 203])
    other.num_shareable_blocks = 0
    assert kv.allocate_slots(other, 12)
    kv.cache_blocks(other, 12)
    kv.free(other)
    assert kv.count_cached_prefix([201]) == 0
    assert kv.free_queue()[-3:] == other_blocks_tail_first(kv, 3)
    kv.audit([])


def other_blocks_tail_first(kv: KVCache, n: int) -> list[int]:
    # The last n entries of the queue are the freed sequence's cached blocks, tail first: vLLM's
    # order for cached blocks (evicted last, a chain's tail before its prefix).
    queue = kv.free_queue()
    tail = queue[-n:]
    assert tail == sorted(tail, reverse=True)  # popped in ascending order, returned reversed
    return tail


def _eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference: every block mapped as it fills (no request's text judged its own)."""
    monkeypatch.setattr(FleetWorkload, "own_text_starts", lambda self: [None] * len(self.requests))


def _run(fleet: FleetSpec, workload: FleetWorkload, fast_forward: bool = True) -> object:
    return everything(FleetSimulation(fleet, workload, keep_token_times=True, fast_forward=fast_forward).run())


@pytest.mark.slow
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(fleets())
def test_keeping_own_blocks_out_of_the_map_changes_no_result(
    monkeypatch: pytest.MonkeyPatch, case: tuple[FleetSpec, FleetWorkload]
) -> None:
    fleet, workload = case
    lazy = FleetSimulation(fleet, workload, keep_token_times=True).run()
    target(float(sum(r.num_preemptions for r in lazy.replicas)), label="preemptions")
    with monkeypatch.context() as m:
        _eager(m)
        eager = FleetSimulation(fleet, workload, keep_token_times=True).run()
    assert everything(lazy) == everything(eager)


def _preempting_fleet() -> tuple[FleetSpec, FleetWorkload]:
    # One replica of 13 blocks of 4 tokens, two requests of unique 16-token prompts (4 blocks
    # each) and 24 outputs: both fit at admission (8 blocks), their outputs do not (2 x 10 > 13),
    # so the later one is preempted, and comes back to find its own prompt blocks in the cache.
    # 4 tokens per step: every block it hits is a step it does not recompute.
    params = tiny_params(13, block_size=4, context_length=52, enable_prefix_caching=True, max_batch_tokens=4)
    fleet = FleetSpec((ReplicaGroup("g", "m", params, 1),), RouterSpec("round-robin", 0.0))
    requests = tuple(FleetRequest(Prompt.unique(f"r{i}", 16), 24, 0.0) for i in range(2))
    return fleet, FleetWorkload(requests)


def test_a_preempted_request_hits_its_own_blocks_when_it_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet, workload = _preempting_fleet()
    lazy = FleetSimulation(fleet, workload, keep_token_times=True).run()
    assert lazy.replicas[0].num_preemptions >= 1
    with monkeypatch.context() as m:
        _eager(m)
        assert _run(fleet, workload) == everything(lazy)
        assert _run(fleet, workload, fast_forward=False) == everything(lazy)
    # The case depends on the mapping at preemption: without it the request recomputes its
    # prompt when it comes back, and its tokens come later.
    free = KVCache.free

    def free_without_mapping(self: KVCache, seq: Sequence, *, preempted: bool = False) -> None:
        free(self, seq)

    monkeypatch.setattr(KVCache, "free", free_without_mapping)
    blind = FleetSimulation(fleet, workload, keep_token_times=True).run()
    assert blind.requests[1].token_times[-1] > lazy.requests[1].token_times[-1]
