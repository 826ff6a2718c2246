"""What a router sees of a replica: the state at its last scrape, never a later one."""

from __future__ import annotations

from llmsim.engine.scheduler import Sequence
from llmsim.fleet import Prompt, Replica
from llmsim.types import RequestId
from tests.engine.scheduler.builders import roofline, seed_params


def seq(name: str, arrival: float, prompt: int = 16, output: int = 50) -> Sequence:
    return Sequence(RequestId(name), arrival, prompt, output)


def view(r: Replica) -> tuple[int, int, float]:
    return r.num_running, r.num_waiting, r.kv_usage


def test_the_view_is_the_state_at_the_last_scrape() -> None:
    # Scrapes at 0.02, 0.07, 0.12, ...; steps of the seed model last ~4.5 ms.
    r = Replica(0, "r/0", seed_params(), scrape_interval=0.05, scrape_phase=0.02)
    ended: list[Sequence] = []
    r.route(seq("a", 0.0), 0.0)
    deadline = r.start_step(0.0, ended)
    assert deadline == roofline(16, 16)
    r.observe(0.01)
    assert view(r) == (0, 0, 0.0)  # nothing scraped yet
    r.observe(0.03)
    one_block = 1 / r.scheduler.kv.num_blocks
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


def test_no_prefix_cache_is_simulated_yet() -> None:
    r = Replica(0, "r/0", seed_params(), scrape_interval=0.0, scrape_phase=0.0)
    assert r.cached_prefix_tokens(Prompt.unique("x", 1000)) == 0
