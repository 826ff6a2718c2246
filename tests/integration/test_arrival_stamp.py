"""The arrival stamp is taken when the server starts parsing a request, not when the app gets to it (real server)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from tests.support.server import running_server

pytestmark = pytest.mark.integration

CONFIG = """
version: 1
models:
  - {name: fixed, engine: fixed, context_length: 1024, latency: {ttft_overhead_ms: 200, itl_ms: 10}}
"""
TTFT_S = 0.200
LINE_GAP_S = 0.300


def test_the_timeline_starts_at_the_first_byte(tmp_path: Path) -> None:
    """The request line arrives, then the rest 300 ms later: the first token is due 200 ms after the
    first byte, so it is already due when the request is complete and leaves at once. Stamped when
    the app is called (the headers complete), it would leave 200 ms after the request was sent."""

    async def first_token_after_sending(port: int) -> float:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = json.dumps({"model": "fixed", "prompt": "hi", "max_tokens": 2, "stream": True}).encode()
        writer.write(b"POST /v1/completions HTTP/1.1\r\n")
        await writer.drain()
        await asyncio.sleep(LINE_GAP_S)
        writer.write(
            b"host: test\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        sent = time.monotonic()
        while b'"text"' not in await reader.readline():
            pass
        waited = time.monotonic() - sent
        writer.close()
        return waited

    with running_server(tmp_path, config=CONFIG) as server:
        waited = asyncio.run(first_token_after_sending(server.port))
    # Due at first byte + 200 ms, i.e. 100 ms before the request was even complete.
    assert waited < TTFT_S / 2, f"first token {waited * 1000:.0f} ms after the request was sent"
