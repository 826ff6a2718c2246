"""What a router sees of a replica: the state at its last scrape, never a later one."""

from __future__ import annotations

from llmsim.engine.scheduler import Sequence
from llmsim.fleet import FleetRequest, Prompt, Replica, Segment
from llmsim.fleet.prompt import BlockHasher
from llmsim.types import RequestId
from tests.engine.scheduler.builders import roofline, seed_params


def seq(name: str, arrival: float, prompt: int = 16, output: int = 50) -> Sequence:
    return Sequence(RequestId(name), arrival, prompt, output)


def view(r: Replica) -> tuple[int, int, float]:
    return r.num_running, r.num_waiting, r.kv_usage


def test_the_view_is_the_state_at_the_last_scrape() -> None:
    # Scrapes at 0.02, 0.07, 0.12, ...; steps of the reference model last ~4.5 ms.
    r = Replica(0, "r/0", seed_params(), scrape_interval=0.05, scrape_phase=0.02)
    ended: list[Sequence] = []
    r.route(seq("a", 0.0), 0.0)
    deadline = r.start_step(0.0, ended)
    assert deadline == roofline(16, 16)
    r.observe(0.01)
    assert view(r) == (0, 0, 0.0)  # nothing scraped yet
    r.observe(0.03)
    # vLLM's usage: over the N - 1 usable blocks (block 0 is the null block).
    one_block = 1 / (r.scheduler.kv.num_blocks - 1)
    assert view(r) == (1, 0, one_block)  # the scrape at 0.02: "a" running in one block
    # "b" arrives at 0.04 while a step runs: waiting (in the inbox) from then on ...
    r.route(seq("b", 0.04), 0.04)
    r.observe(0.06)
    assert view(r) == (1, 0, one_block)  # ... but the view is still the scrape at 0.02
    r.observe(0.07)
    assert view(r) == (1, 1, one_block)  # the scrape at 0.07 sees it


def test_a_scrape_between_two_changes_reads_the_state_between_them() -> None:
    # Scrape at 0.05; changes at 0.03 (route "a") and 0.06 (route "b"); read at 0.08.
    r = Replica(0, "r/0", seed_params(), scrape_interval=0.05, scrape_phase=0.05)
    r.route(seq("a", 0.03), 0.03)
    r.route(seq("b", 0.06), 0.06)
    r.observe(0.08)
    assert view(r) == (0, 1, 0.0)  # at 0.05 only "a" was there


def test_a_zero_interval_is_a_live_view() -> None:
    r = Replica(0, "r/0", seed_params(), scrape_interval=0.0, scrape_phase=0.0)
    r.route(seq("a", 0.0), 0.0)
    r.observe(0.0)
    assert view(r) == (0, 1, 0.0)
    r.start_step(0.0, [])
    r.observe(0.0)
    assert view(r)[:2] == (1, 0)


def run_to_end(r: Replica, now: float) -> float:
    """Drive the replica alone, as the fleet loop does, until it is idle; the time it got there."""
    ended: list[Sequence] = []
    event = r.start_step(now, ended)
    while event is not None:
        now = event
        event = r.start_step(now, ended) if r.on_event(now, ended) else r.next_event()
    return now


def test_the_prefix_cache_is_the_replica_s_own() -> None:
    # A 64-token system prompt and a 16-token question: 5 full blocks of 16, all cached by the prefill.
    system = Segment("system:0", 64)
    first = FleetRequest(Prompt((system, Segment("user:0", 16))), 4)
    r = Replica(0, "r/0", seed_params(), 0.0, 0.0, BlockHasher(16))
    seq0 = r.sequence(0, first, 0.0)
    r.route(seq0, 0.0)
    end = run_to_end(r, 0.0)
    assert r.cached_prefix_tokens(first.prompt) == 80
    # Another question after the same system prompt: its 4 blocks; another system prompt: nothing.
    second = FleetRequest(Prompt((system, Segment("user:1", 20))), 4)
    assert r.cached_prefix_tokens(second.prompt) == 64
    assert r.cached_prefix_tokens(Prompt((Segment("system:1", 64), Segment("user:1", 20)))) == 0
    # Admitted, the second request finds those 64 tokens and computes its last 20 only.
    seq1 = r.sequence(1, second, end)
    r.route(seq1, end)
    run_to_end(r, end)
    assert (r.prefix_hit_tokens(seq0), r.prefix_query_tokens(seq0)) == (0, 80)
    assert (r.prefix_hit_tokens(seq1), r.prefix_query_tokens(seq1)) == (64, 84)
    assert seq1.first_token_time == end + roofline(20, 84)


def test_a_replica_without_prefix_caching_finds_nothing_and_counts_no_lookups() -> None:
    request = FleetRequest(Prompt((Segment("system:0", 64),)), 4)
    r = Replica(0, "r/0", seed_params(enable_prefix_caching=False), 0.0, 0.0, BlockHasher(16))
    seq = r.sequence(0, request, 0.0)
    r.route(seq, 0.0)
    run_to_end(r, 0.0)
    assert r.cached_prefix_tokens(request.prompt) == 0
    assert (r.prefix_hit_tokens(seq), r.prefix_query_tokens(seq)) == (0, 0)
