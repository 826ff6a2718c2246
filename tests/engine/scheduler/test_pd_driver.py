"""Disaggregated prefill/decode on the live driver, two engines in virtual loop time (looptime),
joined by an in-process peer instead of the TCP side channel.

Expected times from the link's arithmetic and the roofline (builders.roofline), by hand.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from llmsim.engine.clock import MonotonicClock
from llmsim.engine.errors import RequestFailed
from llmsim.engine.scheduler import SchedulerEngine
from llmsim.engine.scheduler.kv_link import KVLinkSpec
from llmsim.types import FinishReason, GenerationPlan, KVHandoff, RemotePrefill, RequestId

from .builders import KV_PER_TOKEN, roofline, seed_params

LINK = KVLinkSpec.from_config(bandwidth_gbps=50.0, latency_ms=0.5)
TIMEOUT_S = 30.0
PROMPT = 64


class DirectPeer:
    """The decode engine's line to one prefill engine, without sockets."""

    def __init__(self, prefill: SchedulerEngine) -> None:
        self.prefill = prefill
        self.released: list[str] = []
        self.gate: asyncio.Event | None = None

    async def check(self, remote: RemotePrefill) -> bool:
        if self.gate is not None:
            await self.gate.wait()
        return self.prefill.held_blocks(remote.request_id) is not None

    async def release(self, remote: RemotePrefill) -> None:
        self.released.append(remote.request_id)
        self.prefill.release_held(remote.request_id)


def plan(n: int, handoff: KVHandoff | None = None) -> GenerationPlan:
    p = GenerationPlan(PROMPT, tuple(f"t{i}" for i in range(n)), FinishReason.LENGTH, "e")
    return replace(p, kv_handoff=handoff)


async def engines(peer_gate: asyncio.Event | None = None) -> tuple[SchedulerEngine, SchedulerEngine, DirectPeer]:
    clock = MonotonicClock(now=asyncio.get_running_loop().time)
    params = seed_params(kv_link=LINK, kv_abort_timeout_s=TIMEOUT_S)
    prefill = SchedulerEngine(params, clock)
    peer = DirectPeer(prefill)
    peer.gate = peer_gate
    decode = SchedulerEngine(params, clock, kv_peer=peer)
    await prefill.start()
    await decode.start()
    return prefill, decode, peer


async def prefill_leg(prefill: SchedulerEngine, rid: str) -> RemotePrefill:
    (stream,) = await prefill.submit(
        [plan(1, KVHandoff(remote_decode=True))], asyncio.get_running_loop().time(), [RequestId(rid)]
    )
    async for _ in stream:
        pass
    blocks = prefill.held_blocks(rid)
    assert blocks is not None
    return RemotePrefill("engine", rid, "localhost", 1, blocks)


@pytest.mark.looptime
async def test_decode_ttft_is_the_pull_plus_one_recomputed_token() -> None:
    prefill, decode, peer = await engines()
    remote = await prefill_leg(prefill, "p")
    assert prefill.snapshot().kv_used_blocks == PROMPT // 16
    arrival = asyncio.get_running_loop().time()
    (stream,) = await decode.submit([plan(3, KVHandoff(remote_prefill=remote))], arrival, [RequestId("d")])
    times = [event.sim_time async for event in stream]
    pull = LINK.latency_s + PROMPT * KV_PER_TOKEN / LINK.bandwidth_bytes_per_s
    # The last prompt token recomputed (context 64), then two decode steps.
    first = arrival + pull + roofline(1, PROMPT)
    assert times[0] == pytest.approx(first, rel=1e-9)
    assert times[1] == pytest.approx(first + roofline(1, PROMPT + 1), rel=1e-9)
    assert stream.num_cached_tokens == PROMPT - 1
    assert peer.released == ["p"]
    assert prefill.snapshot().kv_used_blocks == 0
    assert prefill.held_blocks("p") is None
    assert decode.snapshot().kv_used_blocks == 0


class SlowPeer(DirectPeer):
    """The prefill replica's answer takes ``delay`` (its round trip on a busy host)."""

    delay = 0.0

    async def check(self, remote: RemotePrefill) -> bool:
        await asyncio.sleep(self.delay)
        return await super().check(remote)


@pytest.mark.looptime
@pytest.mark.parametrize("fraction", [0.5, 2.0])
async def test_the_answers_round_trip_delays_a_nixl_pull_only_past_the_pull(fraction: float) -> None:
    """vLLM's decode leg comes after its prefill leg held the blocks: the side channel's answer is
    llmsim's plumbing, so an answer within the pull's time leaves the pull's end where the link
    put it, and a later one makes the leg ready when it comes (not a pull's time after it)."""
    clock = MonotonicClock(now=asyncio.get_running_loop().time)
    params = seed_params(kv_link=LINK, kv_abort_timeout_s=TIMEOUT_S)
    prefill = SchedulerEngine(params, clock)
    peer = SlowPeer(prefill)
    pull = LINK.latency_s + PROMPT * KV_PER_TOKEN / LINK.bandwidth_bytes_per_s
    peer.delay = fraction * pull
    decode = SchedulerEngine(params, clock, kv_peer=peer)
    await prefill.start()
    await decode.start()
    remote = await prefill_leg(prefill, "p")
    arrival = asyncio.get_running_loop().time()
    (stream,) = await decode.submit([plan(2, KVHandoff(remote_prefill=remote))], arrival, [RequestId("d")])
    times = [event.sim_time async for event in stream]
    ready = arrival + max(pull, peer.delay)
    # looptime's clock moves in microseconds: an answer after a sleep comes at its resolution.
    assert times[0] == pytest.approx(ready + roofline(1, PROMPT), abs=2e-6)
    # The old rule, a whole pull after the answer, is later still.
    assert times[0] < arrival + peer.delay + pull + roofline(1, PROMPT) - 1e-4


@pytest.mark.looptime
async def test_unpulled_blocks_are_freed_at_the_timeout() -> None:
    prefill, _, _ = await engines()
    await prefill_leg(prefill, "p")
    finished = asyncio.get_running_loop().time()
    await asyncio.sleep(TIMEOUT_S - 0.01)
    assert prefill.snapshot().kv_used_blocks == PROMPT // 16
    await asyncio.sleep(0.02)
    assert asyncio.get_running_loop().time() > finished + TIMEOUT_S
    assert prefill.snapshot().kv_used_blocks == 0
    assert prefill.release_held("p") is False


@pytest.mark.looptime
async def test_a_client_leaving_during_the_pull_frees_both_sides() -> None:
    gate = asyncio.Event()
    prefill, decode, peer = await engines(peer_gate=gate)
    remote = await prefill_leg(prefill, "p")
    (stream,) = await decode.submit(
        [plan(3, KVHandoff(remote_prefill=remote))], asyncio.get_running_loop().time(), [RequestId("d")]
    )
    await asyncio.sleep(0.001)
    # Admitted and waiting for its pull: its prompt's blocks are held on the decode side too.
    assert decode.snapshot().kv_used_blocks == PROMPT // 16
    assert decode.snapshot().num_waiting == 1
    await stream.aclose()
    gate.set()
    await asyncio.sleep(0.001)
    assert decode.snapshot().kv_used_blocks == 0
    assert peer.released == ["p"]
    assert prefill.snapshot().kv_used_blocks == 0


@pytest.mark.looptime
async def test_a_pull_from_a_replica_that_lost_the_blocks_fails() -> None:
    _prefill, decode, peer = await engines()
    gone = RemotePrefill("engine", "never-prefilled", "localhost", 1, (1, 2, 3, 4))
    (stream,) = await decode.submit(
        [plan(3, KVHandoff(remote_prefill=gone))], asyncio.get_running_loop().time(), [RequestId("d")]
    )
    with pytest.raises(RequestFailed):
        async for _ in stream:
            pass
    assert decode.snapshot().kv_used_blocks == 0
    assert peer.released == []


@pytest.mark.looptime
async def test_with_recompute_a_failed_pull_prefills_locally() -> None:
    clock = MonotonicClock(now=asyncio.get_running_loop().time)
    params = seed_params(kv_link=LINK)
    prefill = SchedulerEngine(params, clock)
    decode = SchedulerEngine(params, clock, kv_peer=DirectPeer(prefill), recompute_failed_pulls=True)
    await decode.start()
    gone = RemotePrefill("engine", "never-prefilled", "localhost", 1, (1, 2, 3, 4))
    arrival = asyncio.get_running_loop().time()
    (stream,) = await decode.submit([plan(2, KVHandoff(remote_prefill=gone))], arrival, [RequestId("d")])
    times = [event.sim_time async for event in stream]
    assert len(times) == 2
    assert stream.num_cached_tokens == 0


@pytest.mark.looptime
async def test_a_leg_held_under_a_name_is_found_and_expires_by_that_name() -> None:
    prefill, _, _ = await engines()
    leg = plan(1, KVHandoff(remote_decode=True, held_as="bootstrap_room:7"))
    (stream,) = await prefill.submit([leg], asyncio.get_running_loop().time(), [RequestId("p")])
    async for _ in stream:
        pass
    assert prefill.held_blocks("p") is None
    assert prefill.held_blocks("bootstrap_room:7") is not None
    await asyncio.sleep(TIMEOUT_S + 0.01)
    assert prefill.held_blocks("bootstrap_room:7") is None
    assert prefill._held == {}
    assert prefill.snapshot().kv_used_blocks == 0
