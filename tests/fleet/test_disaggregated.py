"""Disaggregated prefill/decode fleets in virtual time: the hand-off timed by hand from the roofline
and the link, and the loop checked against stepping every step."""

from __future__ import annotations

import pytest

from llmsim.engine.scheduler import SchedulerParams
from llmsim.engine.scheduler.kv_link import KVLinkSpec
from llmsim.fleet import FleetSpec, FleetWorkload, ReplicaGroup, RouterSpec, WorkloadShape, compare_routers, generate
from llmsim.fleet.report import fleet_json, format_comparison
from llmsim.fleet.simulation import FleetSimulation
from llmsim.types import FinishReason
from tests.engine.scheduler.builders import KV_PER_TOKEN, roofline, seed_params, sized_params

from .builders import request, workload

BANDWIDTH = 50e9  # bytes/s
LATENCY = 0.0005  # s
LINK = KVLinkSpec(BANDWIDTH, LATENCY)


def pd_fleet(
    prefill: int, decode: int, policy: str = "round-robin", params: SchedulerParams | None = None
) -> FleetSpec:
    params = params or seed_params()
    groups = (
        ReplicaGroup("prefill", "m", params, prefill, kv_role="kv_producer", kv_link=LINK),
        ReplicaGroup("decode", "m", params, decode, kv_role="kv_consumer", kv_link=LINK),
    )
    return FleetSpec(groups, RouterSpec(policy, 0.0))  # type: ignore[arg-type]


def pull(tokens: int) -> float:
    return tokens * KV_PER_TOKEN / BANDWIDTH


def test_one_request_prefills_pulls_recomputes_one_token_and_decodes() -> None:
    """Prefill of 16 tokens on the prefill replica (one token, blocks held); at its end the decode
    leg is admitted on the decode replica, pulls 16 tokens' KV (bytes / bandwidth + latency),
    recomputes the last prompt token (1 token reading 16 of KV), then decodes at 17 and 18."""
    sim = FleetSimulation(pd_fleet(1, 1), workload((0.0, 16, 3)), keep_token_times=True, audit=True)
    result = sim.run()
    (outcome,) = result.requests
    t1 = roofline(16, 16)
    ready = t1 + pull(16) + LATENCY
    first = ready + roofline(1, 16)
    assert outcome.token_times == pytest.approx(
        (first, first + roofline(1, 17), first + roofline(1, 17) + roofline(1, 18))
    )
    assert outcome.ttft == pytest.approx(first)
    assert outcome.replica == 1  # decoded on the decode replica
    prefill, decode = sim.replicas
    assert prefill.num_routed == decode.num_routed == 1
    # The pull freed the prefill side's blocks; nothing is held or used at the end.
    assert not prefill.scheduler.held
    assert prefill.scheduler.kv.num_used == decode.scheduler.kv.num_used == 0
    assert decode.scheduler.link is not None
    assert decode.scheduler.link.bytes_moved == 16 * KV_PER_TOKEN


def test_pulls_into_one_decode_replica_queue_on_its_link() -> None:
    """Two requests prefilled side by side on two prefill replicas; both decode legs reach the one
    decode replica at t1 and pull one after the other: the second's bytes arrive one transfer later
    (before the first's recompute step ends), so it recomputes beside the first's first decode."""
    result = FleetSimulation(pd_fleet(2, 1), workload((0.0, 16, 2), (0.0, 16, 2)), keep_token_times=True).run()
    t1 = roofline(16, 16)
    ready = t1 + pull(16) + LATENCY
    assert pull(16) < roofline(1, 16)  # the second pull is in before the first recompute ends
    first, second = result.requests
    assert first.ttft == pytest.approx(ready + roofline(1, 16))
    # Step 2: the first's decode (context 17) and the second's recompute (context 16).
    assert second.ttft == pytest.approx(ready + roofline(1, 16) + roofline(2, 33))
    assert first.token_times[1] == second.token_times[0]


def test_fast_forward_gives_the_stepped_timeline() -> None:
    """Jumping over decode runs changes nothing, with KV short enough that held blocks and pulls
    keep requests waiting (the audit checks every block after every step)."""
    shape = WorkloadShape(25.0, 6.0, 600, 120, seed=3, system_prompt_tokens=200, system_prompts=3)
    fleet = pd_fleet(2, 2, "least-requests", sized_params(160))
    runs = [
        FleetSimulation(fleet, generate(shape), keep_token_times=True, fast_forward=ff, audit=True)
        for ff in (True, False)
    ]
    results = [sim.run() for sim in runs]
    jumped, stepped = results
    assert jumped.summary().num_preemptions > 0  # the scenario is short of blocks
    assert [o.token_times for o in jumped.requests] == [o.token_times for o in stepped.requests]
    assert [o.replica for o in jumped.requests] == [o.replica for o in stepped.requests]
    assert all(o.finish_reason is FinishReason.STOP for o in jumped.requests)
    for sim in runs:
        assert all(not r.scheduler.held and r.scheduler.kv.num_used == 0 for r in sim.replicas)


def test_compare_puts_the_aggregated_fleet_of_the_same_gpus_beside() -> None:
    fleet = pd_fleet(1, 2)
    plans = compare_routers(fleet, generate(WorkloadShape(10.0, 3.0, 500, 50)), ["round-robin", "least-requests"])
    assert [(p.fleet.disaggregated, p.fleet.router.policy) for p in plans] == [
        (True, "round-robin"),
        (False, "round-robin"),
        (True, "least-requests"),
        (False, "least-requests"),
    ]
    assert {p.fleet.num_gpus for p in plans} == {3}
    text = format_comparison(plans, 1.0)
    assert "round-robin P/D" in text
    assert "round-robin aggregated" in text


def test_a_fleet_needs_both_roles() -> None:
    with pytest.raises(ValueError, match="kv_producer"):
        FleetSpec((ReplicaGroup("prefill", "m", seed_params(), 1, kv_role="kv_producer", kv_link=LINK),))


def test_a_client_leaving_during_the_pull_frees_both_sides() -> None:
    """The client leaves after the prefill (at t1) but before the pull is in: the decode leg ends
    aborted, and the prefill replica frees the blocks it held rather than wait for its timeout."""
    t1 = roofline(16, 16)
    leave = t1 + pull(16) / 2
    sim = FleetSimulation(pd_fleet(1, 1), FleetWorkload((request(0, 0.0, 16, 3, abort_at=leave),)), audit=True)
    (outcome,) = sim.run().requests
    assert outcome.aborted
    assert outcome.e2e == pytest.approx(leave)
    prefill, decode = sim.replicas
    assert not prefill.scheduler.held
    assert prefill.scheduler.kv.num_used == decode.scheduler.kv.num_used == 0


def handoff_fleet(handoff: float) -> FleetSpec:
    spec = pd_fleet(1, 1)
    return FleetSpec(spec.groups, RouterSpec("round-robin", 0.0, handoff=handoff))


def test_the_handoff_delays_the_decode_leg_on_an_idle_decode_replica_by_exactly_itself() -> None:
    """One request: the decode leg reaches the idle decode replica ``handoff`` after the prefill
    leg's token (t1), so its pull, recompute and every token come exactly that much later."""
    handoff = 0.004
    sim = FleetSimulation(handoff_fleet(handoff), workload((0.0, 16, 3)), keep_token_times=True, audit=True)
    (outcome,) = sim.run().requests
    t1 = roofline(16, 16)
    first = t1 + handoff + pull(16) + LATENCY + roofline(1, 16)
    assert outcome.token_times == pytest.approx(
        (first, first + roofline(1, 17), first + roofline(1, 17) + roofline(1, 18))
    )
    assert outcome.ttft == pytest.approx(first)  # from the client's send at 0
    decode_leg = sim.seqs[0]
    assert decode_leg is not None
    assert decode_leg.arrival == pytest.approx(t1 + handoff)
    prefill, decode = sim.replicas
    assert not prefill.scheduler.held
    assert prefill.scheduler.kv.num_used == decode.scheduler.kv.num_used == 0


def test_a_constant_handoff_shifts_a_busy_decode_replicas_whole_timeline() -> None:
    """Request 0 decodes alone on the decode replica (step j at context 16 + j, from its pull);
    request 1, sent when request 0's prefill ends, ends its own prefill at 2 t1 and its decode leg
    arrives ``handoff`` later, in the middle of a step. As vLLM's scheduler, the decode replica
    starts its pull at the next step's start (``pull + latency`` long), and it recomputes in the
    first step starting at or after the pull is in, beside request 0's decode at context 16 + j.

    Every decode leg arrives ``handoff`` later, request 0's steps included: the arrival's place
    among the decode replica's steps, and so each leg's TTFT from its own arrival, do not move;
    the client's TTFT moves by exactly ``handoff``."""
    t1 = roofline(16, 16)
    step = roofline(1, 16)
    ttfts = []
    for handoff in (0.0, 0.4 * step):
        sim = FleetSimulation(
            handoff_fleet(handoff), workload((0.0, 16, 40), (t1, 16, 3)), keep_token_times=True, audit=True
        )
        first, second = sim.run().requests
        boundaries = [t1 + handoff + pull(16) + LATENCY]
        for j in range(40):
            boundaries.append(boundaries[-1] + roofline(1, 16 + j))
        arrival = 2 * t1 + handoff
        admitted = next(b for b in boundaries if b >= arrival)
        assert admitted > arrival  # it waits for a step's end to start its pull
        j = next(k for k, b in enumerate(boundaries) if b >= admitted + pull(16) + LATENCY)
        assert j >= 2  # request 0 decoded alone until then
        assert first.token_times[:j] == pytest.approx(tuple(boundaries[1 : j + 1]))
        assert second.token_times[0] == pytest.approx(boundaries[j] + roofline(2, 32 + j))
        decode_leg = sim.seqs[1]
        assert decode_leg is not None
        assert decode_leg.arrival == pytest.approx(arrival)
        ttfts.append((second.ttft, second.token_times[0] - decode_leg.arrival))
    (client0, leg0), (client1, leg1) = ttfts
    assert client0 is not None
    assert client1 is not None
    assert client1 - client0 == pytest.approx(0.4 * step)
    assert leg1 == pytest.approx(leg0)


def test_a_client_leaving_during_the_handoff_frees_the_held_blocks() -> None:
    """The client leaves between the prefill leg's end (t1) and the decode leg's send: the decode
    leg never goes out, the request ends aborted with no token, and the prefill replica frees the
    blocks it held at once."""
    t1 = roofline(16, 16)
    handoff = 0.004
    leave = t1 + handoff / 2
    sim = FleetSimulation(handoff_fleet(handoff), FleetWorkload((request(0, 0.0, 16, 3, abort_at=leave),)), audit=True)
    (outcome,) = sim.run().requests
    assert outcome.aborted
    assert outcome.ttft is None
    assert outcome.output_tokens == 0
    assert outcome.e2e == pytest.approx(leave)
    prefill, decode = sim.replicas
    assert decode.num_routed == 0
    assert not prefill.scheduler.held
    assert prefill.scheduler.kv.num_used == decode.scheduler.kv.num_used == 0


def test_a_requests_own_handoff_replaces_the_fleets() -> None:
    """Two requests far apart on an idle fleet whose router hands off in 4 ms: the first has no
    hand-off of its own (the fleet's), the second 10 ms, the third 0 (sent at once). Each decode
    leg reaches the decode replica its own hand-off after its prefill leg's token."""
    t1 = roofline(16, 16)
    gap = 1.0
    requests = (
        request(0, 0.0, 16, 3),
        request(1, gap, 16, 3, handoff=0.010),
        request(2, 2 * gap, 16, 3, handoff=0.0),
    )
    sim = FleetSimulation(handoff_fleet(0.004), FleetWorkload(requests), keep_token_times=True, audit=True)
    outcomes = sim.run().requests
    for i, handoff in enumerate((0.004, 0.010, 0.0)):
        decode_leg = sim.seqs[i]
        assert decode_leg is not None
        assert decode_leg.arrival == pytest.approx(i * gap + t1 + handoff)
        assert outcomes[i].ttft == pytest.approx(t1 + handoff + pull(16) + LATENCY + roofline(1, 16))


def test_the_router_picks_the_decode_replica_when_the_request_comes_in() -> None:
    """vllm-router and sglang-router pick the prefill and decode replicas together, as the request
    comes in (select_pd_pair). Request 0 has a long prompt, request 1, sent just after, a short
    one: request 1's prefill leg ends first, yet round robin gave request 0 the first decode
    replica and request 1 the second."""
    sim = FleetSimulation(pd_fleet(2, 2), workload((0.0, 4096, 2), (0.001, 16, 2)), audit=True)
    first, second = sim.run().requests
    leg0, leg1 = sim.prefill_seqs
    assert leg0 is not None
    assert leg1 is not None
    assert leg0.first_token_time is not None
    assert leg1.first_token_time is not None
    assert leg1.first_token_time < leg0.first_token_time
    assert (first.replica, second.replica) == (2, 3)  # decode replicas 0 and 1 (after the 2 prefill)


def test_a_plans_json_names_the_handoff_where_there_is_one() -> None:
    assert fleet_json(handoff_fleet(0.004))["router"]["handoff_ms"] == pytest.approx(4.0)
    assert "handoff_ms" not in fleet_json(handoff_fleet(0.0))["router"]  # as before the setting
