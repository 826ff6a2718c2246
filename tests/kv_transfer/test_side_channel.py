"""The side channel over real TCP on loopback: a decode replica's checks and releases reach the
prefill engine that holds the blocks, and every failure mode answers as docs/pd.md says."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from llmsim.engine import Engine
from llmsim.engine.clock import MonotonicClock
from llmsim.engine.instant import InstantEngine
from llmsim.kv_transfer import SideChannelPeer, SideChannelServer
from llmsim.types import RemotePrefill
from tests.support.server import free_port


class Holding(InstantEngine):
    """An engine holding the blocks of the request ids it is given, until released."""

    def __init__(self, held: dict[str, tuple[int, ...]]) -> None:
        super().__init__(MonotonicClock())
        self.held = dict(held)

    def held_blocks(self, request_id: str) -> tuple[int, ...] | None:
        return self.held.get(request_id)

    def release_held(self, request_id: str) -> bool:
        return self.held.pop(request_id, None) is not None


async def serving(engine: Engine) -> tuple[SideChannelServer, int]:
    port = free_port()
    server = SideChannelServer("127.0.0.1", port)
    server.register("engine-a", engine)
    await server.start()
    return server, port


async def test_check_then_release_frees_the_blocks() -> None:
    engine = Holding({"r1": (4, 5, 6)})
    server, port = await serving(engine)
    peer = SideChannelPeer(timeout_s=5)
    remote = RemotePrefill("engine-a", "r1", "127.0.0.1", port, (4, 5, 6))
    try:
        assert await peer.check(remote) is True
        await peer.release(remote)
        assert engine.held == {}
        # Released once: a second check finds nothing.
        assert await peer.check(remote) is False
    finally:
        await peer.close()
        await server.stop()


async def test_a_restarted_replica_or_a_freed_request_fails_the_check() -> None:
    engine = Holding({"r1": (4,)})
    server, port = await serving(engine)
    peer = SideChannelPeer(timeout_s=5)
    try:
        assert await peer.check(RemotePrefill("engine-before-restart", "r1", "127.0.0.1", port, (4,))) is False
        assert await peer.check(RemotePrefill("engine-a", "unknown", "127.0.0.1", port, (4,))) is False
    finally:
        await peer.close()
        await server.stop()


async def test_a_kept_connection_the_replica_closed_is_replaced() -> None:
    engine = Holding({"r1": (4,), "r2": (5,)})
    server, port = await serving(engine)
    peer = SideChannelPeer(timeout_s=5)
    try:
        assert await peer.check(RemotePrefill("engine-a", "r1", "127.0.0.1", port, (4,))) is True
        # The replica restarts: its side of the kept connection is gone.
        await server.stop()
        server, _ = await serving_on(engine, port)
        assert await peer.check(RemotePrefill("engine-a", "r2", "127.0.0.1", port, (5,))) is True
    finally:
        await peer.close()
        await server.stop()


async def serving_on(engine: Engine, port: int) -> tuple[SideChannelServer, int]:
    server = SideChannelServer("127.0.0.1", port)
    server.register("engine-a", engine)
    await server.start()
    return server, port


async def test_an_unreachable_replica_fails_the_check_and_the_release_does_not_raise() -> None:
    peer = SideChannelPeer(timeout_s=2)
    nowhere = RemotePrefill("engine-a", "r1", "127.0.0.1", free_port(), (4,))
    assert await peer.check(nowhere) is False
    await peer.release(nowhere)


@pytest.mark.parametrize(
    "line",
    [b"not json\n", b"[1, 2]\n", b'{"op": "drop", "engine_id": "engine-a", "request_id": "r1"}\n'],
)
async def test_bad_lines_get_bad_request(line: bytes) -> None:
    server, port = await serving(Holding({"r1": (4,)}))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(line)
        await writer.drain()
        assert json.loads(await reader.readline()) == {"ok": False, "reason": "bad request"}
        writer.close()
    finally:
        await server.stop()


async def test_an_sglang_check_waits_for_its_room_on_any_engine() -> None:
    engine = Holding({})
    server, port = await serving(engine)
    peer = SideChannelPeer(timeout_s=5)
    # SGLang's decode leg names no engine and may arrive before its prefill holds anything.
    room = RemotePrefill("", "bootstrap_room:7", "127.0.0.1", port, (), wait_s=5.0)
    try:
        check = asyncio.ensure_future(peer.check(room))
        await asyncio.sleep(0.05)
        assert not check.done()
        engine.held["bootstrap_room:7"] = (9, 10)
        assert await check is True
        await peer.release(room)
        assert engine.held == {}
        # Never prefilled: the wait ends with a failed check.
        assert await peer.check(replace(room, request_id="bootstrap_room:8", wait_s=0.05)) is False
    finally:
        await peer.close()
        await server.stop()


def test_an_unnamed_engine_answers_only_requests_that_name_no_engine() -> None:
    # A data-parallel server: rank 0's side channel (the SGLang bootstrap port) also finds rank 1's
    # rooms, but a vLLM check naming rank 1's engine id is for rank 1's own port.
    rank0, rank1 = Holding({}), Holding({"bootstrap_room:3": (1,), "r1": (2,)})
    server = SideChannelServer("127.0.0.1", 0)
    server.register("rank-0", rank0)
    server.register_unnamed(rank1)
    assert server.answer({"op": "check", "engine_id": "", "request_id": "bootstrap_room:3"}) == {
        "ok": True,
        "num_blocks": 1,
    }
    assert server.answer({"op": "check", "engine_id": "rank-1", "request_id": "r1"}) == {
        "ok": False,
        "reason": "unknown engine",
    }
    assert server.answer({"op": "release", "engine_id": "", "request_id": "bootstrap_room:3"}) == {"ok": True}
    assert rank1.held == {"r1": (2,)}
