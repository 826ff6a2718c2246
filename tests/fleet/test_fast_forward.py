"""A fleet that jumps over runs of decode steps routes, times and counts exactly as one that steps them.

Routers read replicas between their events (scrapes at any time, live prefix caches), requests
cut runs short, clients leave mid-run, refusals send requests in the middle of an instant's step
starts: every case where a run must look like the steps it replaces.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

from llmsim.engine.scheduler import SchedulerParams
from llmsim.fleet import FleetRequest, FleetSpec, FleetWorkload, Prompt, ReplicaGroup, RouterSpec, Segment
from llmsim.fleet.fleet_result import FleetResult
from llmsim.fleet.simulation import FleetSimulation
from llmsim.fleet.spec import ROUTER_POLICIES
from tests.engine.scheduler.builders import tiny_params


def replica_params(
    draw: st.DrawFn,
    context: int,
    block_size: int,
    num_blocks: int,
    *,
    batch_tokens: tuple[int, int] = (1, 64),
    sequences: tuple[int, int] = (1, 8),
    watermark: float = 0.1,
) -> SchedulerParams:
    return tiny_params(
        num_blocks,
        block_size=block_size,
        context_length=context,
        max_batch_tokens=draw(st.integers(*batch_tokens)),
        max_num_sequences=draw(st.integers(*sequences)),
        watermark=draw(st.sampled_from([0.0, watermark])),
        max_waiting_requests=draw(st.none() | st.integers(1, 4)),
        enable_prefix_caching=draw(st.booleans()),
        async_scheduling=draw(st.booleans()),
        request_overhead_s=draw(st.sampled_from([0.0, 0.0037])),
    )


@st.composite
def fleets(draw: st.DrawFn) -> tuple[FleetSpec, FleetWorkload]:
    block_size = draw(st.sampled_from([1, 2, 4]))
    num_blocks = draw(st.integers(4, 32))
    context = draw(st.integers(4, num_blocks * block_size))
    groups = tuple(
        ReplicaGroup(f"g{g}", "m", replica_params(draw, context, block_size, num_blocks), draw(st.integers(1, 3)))
        for g in range(draw(st.integers(1, 2)))
    )
    router = RouterSpec(
        draw(st.sampled_from(ROUTER_POLICIES)),
        # Scrape intervals near the ~10 ms steps of the tiny model, and a live view.
        draw(st.sampled_from([0.0, 0.005, 0.013, 0.05])),
        seed=draw(st.integers(0, 3)),
    )
    system = [draw(st.integers(0, context // 2)) for _ in range(2)]
    # Uniform: every first request alike and sent at 0, so that replicas share step boundaries
    # and a turn sent as its predecessor ends lands on other replicas' boundaries too.
    uniform = draw(st.booleans())
    own_tokens = draw(st.integers(0, context // 2))
    uniform_output = draw(st.integers(0, context - max(system[0] + own_tokens, 1)))
    # Known answers let decode steps cache output blocks (a run's starts then store as well as
    # allocate); without them its starts only allocate (the common case, a path of its own).
    answers = draw(st.booleans())
    requests: list[FleetRequest] = []
    for i in range(draw(st.integers(1, 16))):
        own = own_tokens if uniform else draw(st.integers(0, context // 2))
        segments = [Segment(f"system:{i % 2}", system[i % 2 if not uniform else 0]), Segment(f"own:{i}", own)]
        prompt = Prompt(tuple(segments))
        output = uniform_output if uniform else draw(st.integers(0, context - max(prompt.num_tokens, 1)))
        answer = Segment(f"answer:{i}", output) if answers else None
        follows = draw(st.none() | st.integers(0, i - 1)) if i else None
        if follows is not None:
            # The next turn: the earlier prompt, its answer, then a short message, if it fits.
            before = requests[follows]
            quoted = (*before.prompt.segments, before.answer) if before.answer is not None else before.prompt.segments
            turn = Prompt((*quoted, Segment(f"own:{i}", 2)))
            if turn.num_tokens + 1 <= context:
                prompt = turn
                output = draw(st.integers(0, context - prompt.num_tokens))
                answer = Segment(f"answer:{i}", output) if answers else None
            else:
                follows = None
        if follows is not None:
            # Think times of 0 send the next turn in the instant its predecessor ended.
            think = draw(st.sampled_from([0.0, 0.0, 0.004, 0.02]))
            requests.append(FleetRequest(prompt, output, think, follows=follows, answer=answer))
        else:
            arrival = 0.0 if uniform else draw(st.integers(0, 600)) / 1000
            abort_at = draw(st.none() | st.integers(0, 1500).map(lambda ms: ms / 1000))
            requests.append(FleetRequest(prompt, output, arrival, None, abort_at, answer=answer))
    concurrency = draw(st.none() | st.integers(1, 4))
    return FleetSpec(groups, router), FleetWorkload(tuple(requests), concurrency)


def everything(result: FleetResult) -> Any:
    return (
        result.requests,
        [
            (
                r.num_routed,
                r.num_steps,
                r.busy_time,
                r.batch_total,
                r.num_preemptions,
                r.kv_peak_used_blocks,
                r.itl_gaps,
            )
            for r in result.replicas
        ],
        result.end,
    )


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_a_fleet_that_jumps_is_the_fleet_that_steps(case: tuple[FleetSpec, FleetWorkload]) -> None:
    fleet, workload = case
    stepped = FleetSimulation(fleet, workload, keep_token_times=True, fast_forward=False).run()
    jumped = FleetSimulation(fleet, workload, keep_token_times=True, fast_forward=True).run()
    target(float(sum(r.num_steps for r in stepped.replicas)), label="steps")
    target(float(sum(o.rejected for o in stepped.requests)), label="refusals")
    for a, b in zip(stepped.requests, jumped.requests, strict=True):
        # The bar: the same token times to 1 ns. They are the same floats.
        assert all(abs(x - y) <= 1e-9 for x, y in zip(a.token_times, b.token_times, strict=True))
    # Every outcome (replica chosen, times, hits), every replica's counters.
    assert everything(jumped) == everything(stepped)
    # The replicas count inter-token gaps as tokens leave (per step in a run): the same counts as
    # every gap of every request served there, taken from its token times.
    for k, replica in enumerate(jumped.replicas):
        gaps = Counter(
            b - a
            for o in jumped.requests
            if o.replica == k
            for a, b in zip(o.token_times, o.token_times[1:], strict=False)
        )
        assert replica.itl_gaps == gaps


def test_a_request_sent_while_replicas_start_sees_which_steps_have_started(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two replicas in lockstep (same requests at 0, round-robin), room for 2 running and 1
    # waiting each, 3 clients. Requests refused at a step start free a client, whose next request
    # is sent in the middle of the instant's step starts: a replica in a run whose step starts at
    # that instant has started it (it comes before the refusing replica) or not yet (after it).
    params = tiny_params(31, block_size=2, context_length=62, max_num_sequences=2, max_waiting_requests=1)
    fleet = FleetSpec((ReplicaGroup("g", "m", params, 2),), RouterSpec("round-robin", 0.0, seed=1))

    def req(i: int, follows: int | None = None) -> FleetRequest:
        return FleetRequest(Prompt((Segment("s", 2), Segment(f"o{i}", 11))), 31, 0.0, follows=follows)

    shape = [req(i) for i in range(6)] + [req(6, 4), req(7, 6), req(8, 6)] + [req(i) for i in range(9, 12)]
    workload = FleetWorkload(tuple(shape), max_concurrency=3)
    stepped = FleetSimulation(fleet, workload, keep_token_times=True, fast_forward=False).run()
    jumped = FleetSimulation(fleet, workload, keep_token_times=True, fast_forward=True).run()
    assert any(o.rejected for o in stepped.requests)
    assert everything(jumped) == everything(stepped)
    # The case depends on it: a fleet that took every such step as not yet started would differ.
    monkeypatch.setattr(FleetSimulation, "_passed", lambda self, replica: False)
    blind = FleetSimulation(fleet, workload, keep_token_times=True, fast_forward=True).run()
    assert everything(blind) != everything(stepped)


def test_a_request_its_replica_refused_at_a_step_start_frees_a_client_for_the_step_after() -> None:
    # One replica, one sequence slot and one waiting slot. A decodes in a run; B waits; C arrives
    # during A's second step and is refused at the third one's start (the queue is full), which
    # that same replica has just taken into its run. C's client sends D at once: D reaches the
    # replica after its step started, so it waits for the next one, as in the stepping loop.
    # (Found by test_own_blocks' random search over fleets(): the replica that refused counted
    # as not started yet, so its run was cut before a step it had started.)
    params = tiny_params(
        4, block_size=1, context_length=4, max_batch_tokens=2, max_num_sequences=1, max_waiting_requests=1
    )
    fleet = FleetSpec((ReplicaGroup("g", "m", params, 1),), RouterSpec("round-robin", 0.0))
    c = FleetRequest(Prompt((Segment("c", 1),)), 1, 0.021)
    b = FleetRequest(Prompt((Segment("b", 1),)), 1, 0.011)
    a = FleetRequest(Prompt((Segment("a", 1),)), 3, 0.001)
    d = FleetRequest(Prompt((Segment("d", 2),)), 1, 0.0, follows=0)
    workload = FleetWorkload((c, b, a, d))
    stepped = FleetSimulation(fleet, workload, keep_token_times=True, fast_forward=False).run()
    jumped = FleetSimulation(fleet, workload, keep_token_times=True, fast_forward=True).run()
    assert everything(jumped) == everything(stepped)
    # A's steps: 10 ms each (tiny_params), from its arrival. C is refused at the start of A's
    # third step, D (sent then) at the start of the step after: A's last token's time.
    a_times = stepped.requests[2].token_times
    refused_c, refused_d = stepped.requests[0], stepped.requests[3]
    assert refused_c.rejected
    assert refused_d.rejected
    assert refused_c.arrival + refused_c.e2e == a_times[1]
    assert refused_d.arrival == a_times[1]
    assert refused_d.arrival + refused_d.e2e == a_times[2]


def test_a_client_leaving_exactly_as_a_step_ends_stops_the_run_there() -> None:
    # Two requests decode together; B's client leaves at the instant of A's 10th token, which is
    # the end of a step of their run: that step releases B's 10th token too, the next does not
    # include B, and the replica starts it at once.
    params = tiny_params(64, block_size=4, context_length=256)
    fleet = FleetSpec((ReplicaGroup("g", "m", params, 1),), RouterSpec("round-robin", 0.0))
    a = FleetRequest(Prompt((Segment("a", 8),)), 40, 0.0)
    b = FleetRequest(Prompt((Segment("b", 8),)), 40, 0.0)
    free = FleetSimulation(fleet, FleetWorkload((a, b)), keep_token_times=True).run()
    boundary = free.requests[0].token_times[9]
    leaving = FleetWorkload((a, FleetRequest(b.prompt, 40, 0.0, None, boundary)))
    stepped = FleetSimulation(fleet, leaving, keep_token_times=True, fast_forward=False).run()
    jumped = FleetSimulation(fleet, leaving, keep_token_times=True, fast_forward=True).run()
    assert everything(jumped) == everything(stepped)
    assert len(jumped.requests[1].token_times) == 10
    assert jumped.requests[1].token_times[-1] == boundary


@st.composite
def busy_fleets(draw: st.DrawFn) -> tuple[FleetSpec, FleetWorkload]:
    """Requests arriving one by one into replicas already decoding, with room for larger batches
    than :func:`fleets`: every arrival cuts a run, and the step that admits it is taken into the
    run (``DecodeRun.absorb``) when it can be and stepped when it cannot (a preemption, a prompt
    over the token budget, a queue short of blocks or of sequence slots, a request resumed)."""
    block_size = draw(st.sampled_from([1, 2, 4]))
    # Room for any one prompt (up to 53 tokens), not always for a full batch.
    num_blocks = draw(st.integers(64 // block_size, 160))
    context = num_blocks * block_size
    params = replica_params(
        draw, context, block_size, num_blocks, batch_tokens=(8, 96), sequences=(2, 12), watermark=0.05
    )
    fleet = FleetSpec(
        (ReplicaGroup("g", "m", params, draw(st.integers(1, 2))),),
        RouterSpec(draw(st.sampled_from(ROUTER_POLICIES)), draw(st.sampled_from([0.0, 0.013, 0.05])), seed=1),
    )
    system = draw(st.integers(0, 3 * block_size + 1))
    requests = []
    for i in range(draw(st.integers(2, 24))):
        own = draw(st.integers(1, 40))
        prompt = Prompt((Segment(f"system:{i % 2}", system), Segment(f"own:{i}", own)))
        output = draw(st.integers(1, 60))
        # Milliseconds apart (steps are ~10 ms): most arrive while a batch decodes.
        arrival = draw(st.integers(0, 1500)) / 1000
        abort_at = draw(st.none() | st.none() | st.integers(0, 2000).map(lambda ms: ms / 1000))
        requests.append(FleetRequest(prompt, output, arrival, None, abort_at))
    return fleet, FleetWorkload(tuple(requests), draw(st.none() | st.integers(2, 16)))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_fleets())
def test_requests_arriving_into_decoding_batches_are_timed_as_stepping_times_them(
    case: tuple[FleetSpec, FleetWorkload],
) -> None:
    fleet, workload = case
    stepped = FleetSimulation(fleet, workload, keep_token_times=True, fast_forward=False).run()
    jumped = FleetSimulation(fleet, workload, keep_token_times=True, fast_forward=True).run()
    target(float(sum(r.num_steps for r in stepped.replicas)), label="steps")
    assert everything(jumped) == everything(stepped)
