"""Coordinated omission, against a real (aiohttp) server on loopback whose first answer stalls for a second.

Counts, not wall time: how many requests reached the server while the first one was held, and how
many look slow from the schedule versus from the send.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from llmsim.benchmark import Api, BodyBuilder, LoadClient, PromptShape, Target, open_loop, session, summarize
from llmsim.benchmark.workload import Workload

STALL_S = 1.0


class StallingServer:
    """Streams two tokens per request; the first request it gets waits STALL_S before answering."""

    def __init__(self) -> None:
        self.received = 0
        self.received_during_stall = 0
        self.stalling = False

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.received += 1
        if self.stalling:
            self.received_during_stall += 1
        if self.received == 1:
            self.stalling = True
            await asyncio.sleep(STALL_S)
            self.stalling = False
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for text in ("a", "b"):
            await response.write(
                b'data: {"choices":[{"index":0,"text":"%s","finish_reason":null}]}\n\n' % text.encode()
            )
        await response.write(
            b'data: {"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":2}}\n\ndata: [DONE]\n\n'
        )
        return response


@pytest.fixture
async def stalling() -> AsyncIterator[tuple[StallingServer, str]]:
    server = StallingServer()
    app = web.Application()
    app.router.add_post("/v1/completions", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def twenty_at_20_per_second() -> Workload:
    # Scheduled at 0, 0.05, ..., 0.95 s: all within the first request's stall.
    return open_loop([i * 0.05 for i in range(20)], PromptShape(8, 2))


async def test_a_true_open_loop_keeps_sending_while_the_server_stalls(stalling: tuple[StallingServer, str]) -> None:
    server, url = stalling
    target = Target(url, "m")
    async with session() as http:
        run = await LoadClient(target, http, BodyBuilder("m", Api.COMPLETIONS)).run(twenty_at_20_per_second())
    stats = summarize(run.records)
    assert stats.completed == 20
    # Every other request reached the server during the stall: nothing waited for it.
    assert server.received_during_stall == 19
    # Only the stalled request is slow, from the schedule as from the send.
    assert sum(r.end - r.scheduled > 0.5 for r in run.records) == 1
    assert sum(r.end - r.sent > 0.5 for r in run.records) == 1


async def test_a_concurrency_limit_hides_the_stall_unless_measured_from_the_schedule(
    stalling: tuple[StallingServer, str],
) -> None:
    server, url = stalling
    target = Target(url, "m", max_concurrency=1)
    async with session() as http:
        run = await LoadClient(target, http, BodyBuilder("m", Api.COMPLETIONS)).run(twenty_at_20_per_second())
    stats = summarize(run.records)
    assert stats.completed == 20
    # The limit held every other request back until the stalled one ended.
    assert server.received_during_stall == 0
    # From the send, one request was slow: the coordinated omission of a closed-loop client.
    assert sum(r.end - r.sent > 0.5 for r in run.records) == 1
    # From the schedule, request k (scheduled at 0.05 k) waited until ~1.0 s: at least 1.0 - 0.05 k.
    # Noise only adds delay, so at least requests 0..9 (>= 0.55 s) count as slow.
    assert sum(r.end - r.scheduled > 0.5 for r in run.records) >= 10
    assert stats.send_delay.max >= STALL_S - 0.05 - 0.01
    assert stats.e2e.p99 >= STALL_S - 0.01 > stats.e2e_sent.p50
