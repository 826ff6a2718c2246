"""llmsim serve's protocol with a release gate: a request read while a token release is at hand is
parsed after the release's pass, stamped when it was read (a real uvicorn server, real sockets)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import pytest
import uvicorn

from llmsim.engine.release_gate import ReleaseGate
from llmsim.transport.arrival_watch import ArrivalWatch
from llmsim.transport.http_protocol import stamping_protocol
from tests.transport.test_arrival_watch import REQUEST, StampApp, read_response, send_and_read

pytestmark = pytest.mark.skipif(not hasattr(__import__("select"), "epoll"), reason="epoll is Linux's")

#: Long enough for the server's loop to read what the client sent (loopback).
READ_S = 0.1


@contextlib.asynccontextmanager
async def serving(gate: ReleaseGate, app: StampApp) -> AsyncIterator[int]:
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, loop="asyncio", http=stamping_protocol(ArrivalWatch(), gate), log_level="warning"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(500):
            if server.started:
                break
            await asyncio.sleep(0.01)
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await task


@pytest.mark.parametrize("kept_alive", [True, False])
async def test_a_request_read_while_a_release_is_at_hand_is_parsed_after_the_pass(kept_alive: bool) -> None:
    gate = ReleaseGate(time.monotonic, margin=0.001)
    app = StampApp()
    async with serving(gate, app) as port:
        client = socket.create_connection(("127.0.0.1", port))
        try:
            if kept_alive:
                # A first request, no release pending: answered at once; the connection is idle after it.
                await asyncio.wait_for(asyncio.to_thread(send_and_read, client), 5)
            before = len(app.stamps)
            gate.close("engine", time.monotonic())  # a release due now, its pass not done
            sent = time.monotonic()
            client.sendall(REQUEST)
            await asyncio.sleep(READ_S)
            assert len(app.stamps) == before  # read, not parsed: the app has not seen it
            assert gate.num_held == 1
            opened = time.monotonic()
            gate.open("engine")
            await asyncio.wait_for(asyncio.to_thread(read_response, client), 5)
            assert len(app.stamps) == before + 1
            # Stamped when it was read, a loop turn after the send, not when it was parsed.
            assert sent <= app.stamps[-1] < opened
            # Reading resumed: the next request, no release pending, is answered at once.
            await asyncio.wait_for(asyncio.to_thread(send_and_read, client), 5)
            assert gate.num_held == 1
        finally:
            client.close()


async def test_a_client_gone_while_its_request_is_kept_costs_the_server_nothing() -> None:
    gate = ReleaseGate(time.monotonic, margin=0.001)
    app = StampApp()
    async with serving(gate, app) as port:
        client = socket.create_connection(("127.0.0.1", port))
        gate.close("engine", time.monotonic())
        client.sendall(REQUEST)
        await asyncio.sleep(READ_S)
        # Reading is paused, so the server learns of the close only once it reads again: the
        # request is parsed after the pass, as it would have been at once without the gate, and
        # its answer goes nowhere.
        client.close()
        await asyncio.sleep(READ_S)
        gate.open("engine")
        await asyncio.sleep(READ_S)
        assert len(app.stamps) == 1
        other = socket.create_connection(("127.0.0.1", port))
        try:
            await asyncio.wait_for(asyncio.to_thread(send_and_read, other), 5)
        finally:
            other.close()
        assert len(app.stamps) == 2
