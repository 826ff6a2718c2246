"""The arrival stamp is taken when the server starts parsing a request, not when the app gets to it (real server)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from tests.metrics.scrape import parse
from tests.support.server import running_server

pytestmark = pytest.mark.integration

CONFIG = """
version: 1
models:
  - {name: fixed, engine: fixed, context_length: 1024, latency: {ttft_overhead_ms: 200, itl_ms: 10}}
"""
TTFT_S = 0.200
ITL_S = 0.010
LINE_GAP_S = 1.0


def test_the_timeline_starts_at_the_first_byte(tmp_path: Path) -> None:
    """The request line arrives, then the rest a second later: the first token is due 200 ms after
    the first byte, so it is already due when the request is complete. The server's own release
    lag (release - simulated deadline) shows where the timeline started: neither token can leave
    before the request is complete, 800 and 790 ms past their deadlines as the client sent it.
    The server reads the two parts when its loop gets to them, which can shorten the gap it sees,
    so the test asks for half of that: stamped when the app is called (the headers complete), the
    deadlines would lie after the request was complete and the lags would be a loop turn's."""

    async def stream_in_two_parts(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = json.dumps({"model": "fixed", "prompt": "hi", "max_tokens": 2, "stream": True}).encode()
        writer.write(b"POST /v1/completions HTTP/1.1\r\n")
        await writer.drain()
        await asyncio.sleep(LINE_GAP_S)
        writer.write(
            b"host: test\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        while b"[DONE]" not in await reader.readline():
            pass
        writer.close()

    with running_server(tmp_path, config=CONFIG) as server:
        asyncio.run(stream_in_two_parts(server.port))
        page = parse(httpx.get(server.base_url + "/metrics", timeout=5).text)
    labels = {"model_name": "fixed", "engine": "0"}
    assert page.get("llmsim_token_lag_seconds_count", **labels) == 2
    # Deadlines at first byte + 200 ms and + 210 ms; the request completes at first byte + 1 s.
    lags_as_sent = (LINE_GAP_S - TTFT_S) + (LINE_GAP_S - TTFT_S - ITL_S)
    assert page.get("llmsim_token_lag_seconds_sum", **labels) >= lags_as_sent / 2
