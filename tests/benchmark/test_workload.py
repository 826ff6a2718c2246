"""Workload shapes and seeded schedules."""

from __future__ import annotations

import math
import statistics

import pytest

from llmsim.benchmark import PromptShape, Shape, closed_loop, constant_arrivals, first_arrivals, open_loop, trace
from llmsim.fleet import FleetRequest


def test_a_seeded_poisson_schedule_is_reproducible_and_has_exponential_gaps() -> None:
    rate, n = 50.0, 20_000
    a = first_arrivals(rate, n, poisson=True, seed=7)
    assert a == first_arrivals(rate, n, poisson=True, seed=7)
    assert a[:100] != first_arrivals(rate, 100, poisson=True, seed=8)
    # A shorter list is a prefix of a longer one: the same draws.
    assert first_arrivals(rate, 100, poisson=True, seed=7) == a[:100]
    gaps = [b - x for x, b in zip([0.0, *a], a, strict=False)]
    assert len(gaps) == n
    assert all(g > 0 for g in gaps)
    # Exponential gaps: mean 1/rate with standard error (1/rate)/sqrt(n) = 0.7 % here; 4 standard errors.
    mean = statistics.fmean(gaps)
    assert abs(mean - 1 / rate) < 4 * (1 / rate) / math.sqrt(n)
    # Coefficient of variation 1 and P(gap > mean) = e^-1, both within a few standard errors.
    assert statistics.pstdev(gaps) / mean == pytest.approx(1.0, abs=0.04)
    assert sum(g > 1 / rate for g in gaps) / n == pytest.approx(math.exp(-1), abs=0.015)


def test_constant_arrivals_are_evenly_spaced() -> None:
    assert constant_arrivals(4, 1.0) == [0.0, 0.25, 0.5, 0.75]
    assert first_arrivals(4, 3, poisson=False) == [0.0, 0.25, 0.5]


def test_open_loop_sends_one_distinct_prompt_per_arrival() -> None:
    w = open_loop([0.0, 0.5, 1.0], PromptShape(64, 8), warmup=0.5)
    assert [c.start for c in w.chains] == [0.0, 0.5, 1.0]
    turns = [c.turn(0) for c in w.chains]
    assert all(t is not None and t.prompt_tokens == 64 and t.output_tokens == 8 for t in turns)
    assert len({t.prompt[0].key for t in turns if t is not None}) == 3
    assert all(c.turn(1) is None for c in w.chains)
    assert w.warmup == 0.5


def test_closed_loop_splits_a_request_count_over_the_workers() -> None:
    w = closed_loop(3, PromptShape(16, 4), requests=8)
    counts = [sum(1 for j in range(10) if c.turn(j) is not None) for c in w.chains]
    assert counts == [3, 3, 2]
    assert w.send_until == math.inf
    timed = closed_loop(2, PromptShape(16, 4), duration=5.0)
    assert timed.send_until == 5.0
    assert timed.chains[0].turn(1000) is not None
    with pytest.raises(ValueError, match="exactly one"):
        closed_loop(2, PromptShape(16, 4))


def test_shared_prefix_prompts_share_the_system_prompt_and_nothing_else() -> None:
    shape = PromptShape(1000, 10, Shape.SHARED_PREFIX, system_prompt_tokens=600, prefix_groups=2)
    a, b, c = (shape.turn(i, 0) for i in range(3))
    assert a.prompt_tokens == b.prompt_tokens == 1000
    assert a.prompt[0] == c.prompt[0] != b.prompt[0]  # groups 0, 1, 0
    assert a.prompt[1].key != c.prompt[1].key


def test_multi_turn_prompts_carry_the_conversation_so_far() -> None:
    shape = PromptShape(50, 20, Shape.MULTI_TURN, turns=3)
    lengths = [shape.turn(0, j).prompt_tokens for j in range(4)]
    # Turn t: t x (50 + 20) + 50; turn 3 starts a new conversation.
    assert lengths == [50, 120, 190, 50]
    second, third = shape.turn(0, 1), shape.turn(0, 2)
    assert third.prompt[: len(second.prompt)] == second.prompt


def test_a_trace_replays_arrivals_lengths_and_hang_ups() -> None:
    w = trace([FleetRequest.of(0.0, 10, 5), FleetRequest.of(0.25, 20, 6, abort_at=1.0)])
    first, second = (c.turn(0) for c in w.chains)
    assert first is not None
    assert second is not None
    assert [c.start for c in w.chains] == [0.0, 0.25]
    assert (second.prompt_tokens, second.output_tokens, second.abort_after) == (20, 6, 0.75)
    with pytest.raises(ValueError, match="request 0"):
        trace([FleetRequest.of(0.0, 0, 5)])
