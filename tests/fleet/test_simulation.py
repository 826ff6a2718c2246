"""The fleet event loop: one replica whatever the router and prompt form; routing, concurrency, follow-ups, aborts."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsim.engine.scheduler import SchedulerParams
from llmsim.fleet import (
    FleetRequest,
    FleetSpec,
    FleetWorkload,
    Prompt,
    ReplicaGroup,
    RouterSpec,
    Segment,
    WorkloadShape,
    closed_loop,
    generate,
    plan_fleet,
    simulate,
    simulate_fleet,
)
from llmsim.types import FinishReason
from tests.engine.scheduler.builders import roofline, seed_params, tiny_params

from .builders import fleet_of, request, workload


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[SchedulerParams, list[FleetRequest], FleetWorkload]:
    """Small configs (prefix caching and async scheduling on or off) and prompts that share prefixes.

    A prompt is a shared "system" segment (one of three), a segment of its own, and sometimes the
    prompt and answer of an earlier request (the next turn of a conversation). The same requests go
    to ``simulate()`` as token ids (with output ids for quoted answers: blocks hashed with sha256,
    as vLLM) and to a fleet as segments (the planner's block identities), or as those token ids
    through ``FleetRequest.of``.
    """
    block_size = draw(st.sampled_from([1, 2, 4, 8]))
    num_blocks = draw(st.integers(2, 24))
    context = draw(st.integers(1, num_blocks * block_size))
    params = tiny_params(
        num_blocks,
        block_size=block_size,
        context_length=context,
        max_batch_tokens=draw(st.integers(1, 48)),
        max_num_sequences=draw(st.integers(1, 6)),
        watermark=draw(st.sampled_from([0.0, 0.1, 0.3])),
        max_waiting_requests=draw(st.none() | st.integers(1, 4)),
        enable_prefix_caching=draw(st.booleans()),
        async_scheduling=draw(st.booleans()),
        request_overhead_s=draw(st.sampled_from([0.0, 0.0037])),
    )
    system = [draw(st.integers(0, context)) for _ in range(3)]
    items: list[FleetRequest] = []
    requests: list[FleetRequest] = []
    for i in range(draw(st.integers(0, 14))):
        segments: list[Segment] = []
        quoted = draw(st.none() | st.integers(0, max(0, i - 1))) if i else None
        if quoted is not None and requests[quoted].answer is not None:
            answer = requests[quoted].answer
            assert answer is not None
            segments += [*requests[quoted].prompt.segments, answer]
        else:
            group = draw(st.integers(0, 2))
            segments.append(Segment(f"system:{group}", system[group]))
        used = sum(seg.length for seg in segments)
        if used > context:
            segments = [Segment(f"system:{i % 3}", min(system[i % 3], context))]
            used = segments[0].length
        segments.append(Segment(f"own:{i}", draw(st.integers(0, context - used))))
        prompt = Prompt(tuple(segments))
        output = draw(st.integers(0, context - max(prompt.num_tokens, 1)))
        answer = Segment(f"answer:{i}", output) if draw(st.booleans()) else None
        arrival = draw(st.integers(0, 500)) / 1000
        abort_at = draw(st.none() | st.integers(0, 800).map(lambda ms: ms / 1000))
        requests.append(FleetRequest(prompt, output, arrival, None, abort_at, answer=answer))
        items.append(
            FleetRequest.of(
                arrival,
                prompt.num_tokens,
                output,
                abort_at,
                prompt_token_ids=tuple(prompt.token_ids()),
                output_token_ids=tuple(answer.token_ids()) if answer is not None else None,
            )
        )
    as_ids = draw(st.booleans())
    return params, items, FleetWorkload(tuple(items)) if as_ids else FleetWorkload(tuple(requests))


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(["round-robin", "least-requests", "weighted"]), st.sampled_from([0.0, 0.05]))
def test_one_replica_s_timeline_depends_on_neither_router_nor_how_prompts_are_identified(
    scenario: tuple[SchedulerParams, list[FleetRequest], FleetWorkload], policy: str, scrape: float
) -> None:
    params, items, fleet_workload = scenario
    expected = simulate(params, items)
    result = simulate_fleet(fleet_of(params, 1, policy, scrape=scrape), fleet_workload, keep_token_times=True)  # type: ignore[arg-type]
    assert len(result.requests) == len(expected.requests)
    for got, want in zip(result.requests, expected.requests, strict=True):
        assert got.token_times == tuple(want.token_times)
        assert (got.finish_reason, got.rejected, got.num_preemptions) == (
            want.finish_reason,
            want.rejected,
            want.num_preemptions,
        )
        assert (got.ttft, got.e2e, got.queue_time) == (want.ttft, want.e2e, want.queue_time)
        assert got.prefix_hit_tokens == want.prefix_hit_tokens
    want_summary = expected.summary()
    got_summary = result.summary()
    assert got_summary.latencies.itl == want_summary.latencies.itl
    assert got_summary.latencies.ttft == want_summary.latencies.ttft
    assert got_summary.num_preemptions == want_summary.num_preemptions
    assert sum(r.prefix_query_tokens for r in result.requests) == want_summary.prefix_query_tokens
    assert sum(r.prefix_hit_tokens for r in result.requests) == want_summary.prefix_hit_tokens
    assert result.replicas[0].num_steps == want_summary.replicas[0].num_steps
    assert result.replicas[0].kv_peak_used_blocks == want_summary.replicas[0].kv_peak_used_blocks


def test_one_request_alone_times_like_the_roofline() -> None:
    # Prefill of 16 tokens reads 16 tokens of KV; decodes at 17 and 18 (reference model, efficiencies 1).
    plan = plan_fleet(fleet_of(seed_params(), 3), workload((0.0, 16, 3)), keep_token_times=True)
    (outcome,) = plan.result.requests
    t1 = roofline(16, 16)
    assert outcome.token_times == (t1, t1 + roofline(1, 17), t1 + roofline(1, 17) + roofline(1, 18))
    assert outcome.tpot == (roofline(1, 17) + roofline(1, 18)) / 2
    # Round-robin sent it to the first replica; the other two never stepped.
    assert [r.num_steps for r in plan.result.replicas] == [3, 0, 0]
    assert plan.summary.load_imbalance == 1 / (1 / 3)


def test_round_robin_takes_replicas_in_turn_and_replicas_run_side_by_side() -> None:
    plan = plan_fleet(fleet_of(seed_params(), 3), workload(*[(0.0, 16, 3)] * 7), keep_token_times=True)
    assert [r.replica for r in plan.result.requests] == [0, 1, 2, 0, 1, 2, 0]
    # Each replica batches what it got: replica 0 holds three requests, the others two, and
    # requests alone on different replicas do not slow each other.
    per_replica = [r.num_requests for r in plan.summary.replicas]
    assert per_replica == [3, 2, 2]
    assert plan.summary.load_imbalance == 3 / (7 / 3)
    first = plan.result.requests
    assert first[1].token_times == first[2].token_times  # same shape, same batch size 2
    assert first[0].token_times != first[1].token_times  # batch of 3 reads more KV


def test_least_requests_with_a_live_view_spreads_a_burst_evenly() -> None:
    # Every request of the burst sees the ones routed before it (they wait in the inbox).
    plan = plan_fleet(fleet_of(seed_params(), 4, "least-requests"), workload(*[(0.0, 100, 20)] * 10))
    counts = sorted(r.num_requests for r in plan.summary.replicas)
    assert counts == [2, 2, 3, 3]


def test_a_stale_view_herds_a_burst_onto_the_replica_that_looked_idle() -> None:
    # A long request (2,000 tokens, ~9 s) goes to one replica at t=0. Scrapes every 1 s:
    # replica 0 at 0, 1, 2, ... and replica 1 at 0.5, 1.5, ... (staggered by 1/N). A burst of
    # six short requests at 1.6 s (1 ms apart) sees the last scrapes: the long request's
    # replica running 1, the other idle.
    shapes = [(0.0, 100, 2000)] + [(1.6 + i * 1e-3, 100, 20) for i in range(6)]
    stale = plan_fleet(fleet_of(seed_params(), 2, "least-requests", scrape=1.0), workload(*shapes))
    busy = stale.result.requests[0].replica
    # Every burst request goes to the replica that looked idle, though it got the ones before.
    assert [r.replica for r in stale.result.requests[1:]] == [1 - busy] * 6
    # With a live view each request sees the ones routed before it (running or waiting): the
    # seven requests end up 4 / 3 or 3 / 4 whatever the random tie-breaks chose.
    live = plan_fleet(fleet_of(seed_params(), 2, "least-requests", scrape=0.0), workload(*shapes))
    busy = live.result.requests[0].replica
    loads = [r.num_requests for r in live.summary.replicas]
    assert sorted(loads) == [3, 4]
    assert live.result.requests[1].replica == 1 - busy  # 0 requests against 1


def test_closed_loop_keeps_concurrency_requests_in_flight_and_sends_the_next_at_each_end() -> None:
    plan = plan_fleet(fleet_of(seed_params(), 1), closed_loop(3, 9, 64, 8))
    outcomes = plan.result.requests
    ends = sorted(o.arrival + o.e2e for o in outcomes)
    # The first three are sent at 0; each later one when an earlier one ended.
    assert [o.arrival for o in outcomes[:3]] == [0.0] * 3
    assert sorted(o.arrival for o in outcomes[3:]) == ends[:6]
    for o in outcomes:
        in_flight = sum(p.arrival <= o.arrival < p.arrival + p.e2e for p in outcomes)
        assert in_flight <= 3


def test_a_follow_up_is_sent_think_time_after_its_predecessor_ended() -> None:
    first = request(0, 0.25, 64, 10)
    second = FleetRequest(Prompt.unique("b", 64), 10, arrival=1.5, follows=0)
    plan = plan_fleet(fleet_of(seed_params(), 2, "least-requests"), FleetWorkload((first, second)))
    a, b = plan.result.requests
    assert b.arrival == a.arrival + a.e2e + 1.5


def test_aborts_and_a_full_queue_end_requests_on_any_replica() -> None:
    params = seed_params(max_num_sequences=1, max_waiting_requests=2)
    reqs = [
        request(0, 0.0, 64, 500),
        request(1, 0.0, 64, 10),
        request(2, 0.0, 64, 10, abort_at=0.001),
        request(3, 0.0, 64, 10),
        request(4, 0.0, 64, 10),
    ]
    fleet = FleetSpec((ReplicaGroup("r", "m", params, 2),), RouterSpec("round-robin", 0.0))
    plan = plan_fleet(fleet, FleetWorkload(tuple(reqs)))
    out = plan.result.requests
    assert [o.replica for o in out] == [0, 1, 0, 1, 0]
    # At t=0 replica 0 queues 0 and 2 before its first step (2 waiting: the limit), so 4 is
    # refused; request 0 runs (one sequence at a time) and 2 waits until its client leaves at
    # 1 ms, without a token. Replica 1 queues and runs 1 then 3.
    assert out[4].rejected
    assert out[4].finish_reason is FinishReason.ABORT
    assert out[2].aborted
    assert out[2].ttft is None
    assert out[2].e2e == 0.001
    assert out[2].queue_time == 0.001  # never scheduled: queued until it left
    assert [o.finish_reason for o in (out[0], out[1], out[3])] == [FinishReason.STOP] * 3
    assert out[3].queue_time == out[1].e2e  # ran after 1 finished
    s = plan.summary
    assert (s.num_finished, s.num_aborted, s.num_rejected) == (3, 1, 1)


def test_heterogeneous_groups_run_their_own_parameters() -> None:
    slow = seed_params(memory_efficiency=0.5)
    fleet = FleetSpec(
        (ReplicaGroup("fast", "m", seed_params(), 1), ReplicaGroup("slow", "m", slow, 1)),
        RouterSpec("round-robin", 0.0),
    )
    plan = plan_fleet(fleet, workload((0.0, 16, 2), (0.0, 16, 2)), keep_token_times=True)
    fast, slower = plan.result.requests
    assert fast.ttft == roofline(16, 16)
    # Memory-bound step: half the bandwidth, twice the time.
    assert slower.ttft == 2 * roofline(16, 16)
    assert [r.name for r in plan.summary.replicas] == ["fast/0", "slow/0"]


def test_a_conversation_s_next_turn_hits_the_blocks_its_answer_filled() -> None:
    # Turn 1: a 100-token prompt and 20 output tokens. Its KV covers the prompt and the first 19
    # outputs (the last output's KV is never computed): 119 tokens, 7 full blocks of 16 cached.
    # Turn 2 resends prompt + answer (120 tokens) and a 100-token message: 220 tokens, of which
    # the 7 blocks = 112 tokens hit.
    shape = WorkloadShape(1.0, 1.0, 100, 20, arrivals="constant", turns=2, think_time=0.5)
    plan = plan_fleet(fleet_of(seed_params(), 1), generate(shape), keep_token_times=True)
    first, second = plan.result.requests
    assert (first.prefix_hit_tokens, first.prefix_query_tokens) == (0, 100)
    assert (second.prefix_hit_tokens, second.prefix_query_tokens) == (112, 220)
    assert plan.summary.prefix_hit_rate == 112 / 320
    # Alone on the replica, turn 2 computes its last 108 tokens over a 220-token context.
    assert second.ttft == pytest.approx(roofline(108, 220), rel=1e-12)
    # The same two prompts, but turn 1 not told what its answer is: only its prompt's 6 blocks hit.
    unnamed = FleetWorkload((replace(generate(shape).requests[0], answer=None), generate(shape).requests[1]))
    _, blind = plan_fleet(fleet_of(seed_params(), 1), unnamed).result.requests
    assert blind.prefix_hit_tokens == 96


def test_without_prefix_caching_a_fleet_reports_no_hit_rate() -> None:
    shape = WorkloadShape(1.0, 1.0, 100, 20, arrivals="constant", turns=2, system_prompt_tokens=64)
    plan = plan_fleet(fleet_of(seed_params(enable_prefix_caching=False), 1), generate(shape))
    assert [r.prefix_query_tokens for r in plan.result.requests] == [0, 0]
    assert math.isnan(plan.summary.prefix_hit_rate)


def test_a_request_for_an_adapter_no_replica_serves_is_refused_before_the_run() -> None:
    # vLLM answers 404 to an adapter it does not serve; a plan stops, naming the request.
    requests = (FleetRequest(Prompt.unique("a", 16), 3), FleetRequest(Prompt.unique("b", 16), 3, adapter="sql-lora"))
    with pytest.raises(ValueError, match=r"request 1: unknown LoRA adapter 'sql-lora' \(served: none\)"):
        simulate_fleet(fleet_of(seed_params(), 2), FleetWorkload(requests))
