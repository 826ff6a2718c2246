"""Workload generators: arrival patterns, shared system prompts, conversations, prompts' shared prefixes."""

from __future__ import annotations

from collections import Counter

import pytest

from llmsim.fleet import FleetRequest, FleetWorkload, Prompt, Segment, WorkloadShape, generate, poisson_arrivals


def shape(**kw: object) -> WorkloadShape:
    fields: dict[str, object] = {"rate": 4.0, "duration": 3.0, "prompt_tokens": 100, "output_tokens": 20} | kw
    return WorkloadShape(**fields)  # type: ignore[arg-type]


def test_poisson_is_the_single_replica_generator() -> None:
    w = generate(shape(seed=5))
    assert [r.arrival for r in w.requests] == poisson_arrivals(4.0, 3.0, 5)
    assert {(r.prompt_tokens, r.output_tokens) for r in w.requests} == {(100, 20)}


def test_constant_and_bursts() -> None:
    assert [r.arrival for r in generate(shape(arrivals="constant")).requests] == [k / 4 for k in range(12)]
    # Bursts of 3 at a mean of 4/s: one burst every 0.75 s, at 0, 0.75, 1.5, 2.25.
    bursts = [r.arrival for r in generate(shape(arrivals="bursts", burst_size=3)).requests]
    assert bursts == [0.0] * 3 + [0.75] * 3 + [1.5] * 3 + [2.25] * 3


def test_system_prompts_are_shared_within_a_group_only() -> None:
    w = generate(shape(arrivals="constant", system_prompt_tokens=500, system_prompts=3, seed=1))
    groups = Counter(r.prompt.segments[0].key for r in w.requests)
    assert set(groups) <= {"system:0", "system:1", "system:2"}
    assert len(groups) > 1
    first = w.requests[0]
    assert first.prompt_tokens == 600
    for other in w.requests[1:]:
        same = other.prompt.segments[0] == first.prompt.segments[0]
        assert first.prompt.shared_prefix(other.prompt) == (500 if same else 0)
        # The token ids agree exactly that far, and no further.
        ids_a, ids_b = first.prompt.token_ids(), other.prompt.token_ids()
        if same:
            assert ids_a[:500] == ids_b[:500]
            assert ids_a[500:] != ids_b[500:]
        else:
            assert ids_a[0] != ids_b[0] or ids_a[:5] != ids_b[:5]


def test_a_conversation_resends_its_history_each_turn() -> None:
    w = generate(shape(arrivals="constant", rate=1.0, duration=1.0, turns=3, think_time=2.0, system_prompt_tokens=50))
    t0, t1, t2 = w.requests
    assert (t0.follows, t1.follows, t2.follows) == (None, 0, 1)
    assert (t1.arrival, t2.arrival) == (2.0, 2.0)  # think time after the previous answer
    # system 50 + user 100; + answer 20 + user 100; + answer 20 + user 100
    assert [r.prompt_tokens for r in w.requests] == [150, 270, 390]
    assert t1.prompt.shared_prefix(t0.prompt) == 150
    assert t2.prompt.shared_prefix(t1.prompt) == 270
    assert shape(turns=3, system_prompt_tokens=50).max_prompt_tokens == 390


def test_explicit_token_ids_compare_by_value() -> None:
    a = Prompt((Segment("x", 4, (1, 2, 3, 4)),))
    b = Prompt((Segment("y", 3, (1, 2, 9)),))
    assert a.shared_prefix(b) == 2
    assert a.token_ids() == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ((FleetRequest(Prompt.unique("a", 1), 1, follows=0),), "follows must name an earlier request"),
        ((FleetRequest(Prompt.unique("a", 1), -1),), "output_tokens must be >= 0"),
        (
            (FleetRequest(Prompt.unique("a", 1), 1), FleetRequest(Prompt.unique("b", 1), 1, follows=0, abort_at=3.0)),
            "abort_at needs an absolute arrival",
        ),
    ],
)
def test_inconsistent_workloads_are_refused(requests: tuple[FleetRequest, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FleetWorkload(requests)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="rate must be > 0"):
        shape(rate=0)
    with pytest.raises(ValueError, match="burst_size"):
        shape(burst_size=0)
    with pytest.raises(ValueError, match="arrivals must be one of"):
        shape(arrivals="gamma")
