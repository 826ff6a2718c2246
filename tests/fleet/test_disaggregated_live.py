"""The live driver's P/D legs against the planner's, leg for leg, on the same arrivals.

One prefill and one decode :class:`~llmsim.engine.scheduler.SchedulerEngine` on a virtual loop
(looptime), joined by an in-process peer, serve a seeded open loop of distinct prompts: each
request's prefill leg is sent at its arrival, its decode leg its own hand-off after the prefill
leg's token (as a router does). The planner's P/D fleet of the same models runs the same trace,
each request carrying the same hand-off. Both are the same scheduler, so every token of every leg
must come at the same simulated instant: a difference is a difference between the live driver and
the fleet's replica loop (when a leg joins a step, when its pull starts and completes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from pathlib import Path

import pytest

from llmsim.config import load_models_config
from llmsim.engine.clock import MonotonicClock
from llmsim.engine.scheduler import SchedulerEngine
from llmsim.fleet import FleetSpec, FleetWorkload, load_fleet, poisson_arrivals
from llmsim.fleet.prompt import Prompt, Segment
from llmsim.fleet.simulation import FleetSimulation
from llmsim.fleet.workload import FleetRequest
from llmsim.types import FinishReason, GenerationPlan, KVHandoff, RemotePrefill, RequestId

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples" / "fleet"
MODELS_FILE = EXAMPLES / "pd-live-models.yml"
FLEET_FILE = EXAMPLES / "pd-live-fleet.yml"
REQUESTS = 32
PROMPT = 512
OUTPUT = 16


class DirectPeer:
    """The decode engine's line to the prefill engine, without sockets."""

    def __init__(self, prefill: SchedulerEngine) -> None:
        self.prefill = prefill

    async def check(self, remote: RemotePrefill) -> bool:
        return self.prefill.held_blocks(remote.request_id) is not None

    async def release(self, remote: RemotePrefill) -> None:
        self.prefill.release_held(remote.request_id)


def prompt_ids(i: int) -> tuple[int, ...]:
    return (1000 + i, *((7 * k + 13 * i) % 30000 + 100 for k in range(1, PROMPT)))


def one_of_each() -> FleetSpec:
    spec = load_fleet(FLEET_FILE, load_models_config(str(MODELS_FILE)), str(MODELS_FILE))
    return FleetSpec(tuple(dataclasses.replace(g, count=1) for g in spec.groups), spec.router)


def trace(rate: float, handoffs: tuple[float, float], seed: int) -> FleetWorkload:
    rng = random.Random(seed)
    arrivals = poisson_arrivals(rate, 60.0, seed)[:REQUESTS]
    return FleetWorkload(
        tuple(
            FleetRequest(
                Prompt((Segment(f"ids:{i}", PROMPT, prompt_ids(i)),)),
                OUTPUT,
                arrival,
                handoff=rng.uniform(*handoffs),
            )
            for i, arrival in enumerate(arrivals)
        )
    )


async def serve_live(spec: FleetSpec, workload: FleetWorkload) -> list[list[float]]:
    """Each request's decode-leg token times on the live engines."""
    loop = asyncio.get_running_loop()
    clock = MonotonicClock(now=loop.time)
    prefill_group, decode_group = spec.groups
    prefill = SchedulerEngine(dataclasses.replace(prefill_group.params, kv_link=prefill_group.kv_link), clock)
    decode = SchedulerEngine(
        dataclasses.replace(decode_group.params, kv_link=decode_group.kv_link), clock, kv_peer=DirectPeer(prefill)
    )
    await prefill.start()
    await decode.start()
    origin = loop.time()

    async def one(i: int, request: FleetRequest) -> list[float]:
        await asyncio.sleep(max(0.0, origin + request.arrival - loop.time()))
        ids = request.prompt_token_ids
        assert ids is not None
        leg = GenerationPlan(PROMPT, ("x",), FinishReason.LENGTH, "e", prompt_token_ids=ids)
        leg = dataclasses.replace(leg, kv_handoff=KVHandoff(remote_decode=True))
        (stream,) = await prefill.submit([leg], origin + request.arrival, [RequestId(f"p{i}")])
        (end,) = [event.sim_time async for event in stream]
        blocks = prefill.held_blocks(f"p{i}")
        assert blocks is not None
        assert request.handoff is not None
        sent = end + request.handoff
        await asyncio.sleep(max(0.0, sent - loop.time()))
        remote = RemotePrefill("engine", f"p{i}", "localhost", 1, blocks)
        tokens = tuple(f"t{k}" for k in range(OUTPUT))
        plan = GenerationPlan(PROMPT, tokens, FinishReason.LENGTH, "e", prompt_token_ids=ids)
        plan = dataclasses.replace(plan, kv_handoff=KVHandoff(remote_prefill=remote))
        (stream,) = await decode.submit([plan], sent, [RequestId(f"d{i}")])
        return [event.sim_time - origin async for event in stream]

    try:
        return await asyncio.gather(*(one(i, r) for i, r in enumerate(workload.requests)))
    finally:
        await prefill.stop()
        await decode.stop()


@pytest.mark.looptime
@pytest.mark.parametrize(("rate", "handoffs", "seed"), [(4.0, (0.002, 0.008), 3), (8.0, (0.0, 0.04), 5)])
async def test_the_live_decode_legs_are_the_plans(rate: float, handoffs: tuple[float, float], seed: int) -> None:
    spec = one_of_each()
    workload = trace(rate, handoffs, seed)
    simulation = FleetSimulation(spec, workload, keep_token_times=True)
    planned = [list(outcome.token_times) for outcome in simulation.run().requests]
    live = await serve_live(spec, workload)
    for i, (a, b) in enumerate(zip(live, planned, strict=True)):
        assert a == pytest.approx(b, abs=1e-6), i
