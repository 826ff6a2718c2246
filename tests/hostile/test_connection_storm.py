"""A small connection storm against a real server (loopback only, 500 connections).

Clients that behave, and clients that leave: before sending their body, half-way through it,
mid-stream, at once, or after sending garbage. Afterwards the server still serves, and its log
holds no traceback and no ERROR line: a client's own disconnect is not the server's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator

import pytest

from tests.support.schema_fuzz import CONFIG
from tests.support.server import ServerProcess, running_server

pytestmark = pytest.mark.integration

CONNECTIONS = 500
AT_ONCE = 100
CHAT = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).encode()
STREAM = json.dumps(
    {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64, "stream": True}
).encode()


def _request(body: bytes, *, declared: int | None = None) -> bytes:
    length = len(body) if declared is None else declared
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % length
    )


async def _client(port: int, kind: int) -> str:
    """One connection; what it does depends on ``kind``. Returns what happened, for the tally."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if kind == 0:  # a whole request, the whole answer read
            writer.write(_request(CHAT) + CHAT)
            answer = await reader.read()
            return "ok" if answer.startswith(b"HTTP/1.1 200") else answer[:40].decode(errors="replace")
        if kind == 1:  # a stream, read to its end
            writer.write(_request(STREAM) + STREAM)
            answer = await reader.read()
            # Chunked: the last event, then the empty chunk that ends the body.
            whole = b"data: [DONE]" in answer and answer.endswith(b"\r\n0\r\n\r\n")
            return "ok" if whole else "cut stream"
        if kind == 2:  # half a body, then gone
            writer.write(_request(CHAT, declared=len(CHAT) * 2) + CHAT)
            await writer.drain()
            return "left"
        if kind == 3:  # headers, no body, gone
            writer.write(_request(CHAT))
            await writer.drain()
            return "left"
        if kind == 4:  # a stream, gone after its first bytes
            writer.write(_request(STREAM) + STREAM)
            await reader.read(64)
            return "left"
        if kind == 5:  # not HTTP at all
            writer.write(b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
            await writer.drain()
            return "left"
        return "left"  # connected, gone at once
    finally:
        writer.close()
        with contextlib.suppress(OSError):  # the reset of a connection we cut
            await writer.wait_closed()


async def _storm(port: int) -> dict[str, int]:
    tally: dict[str, int] = {}
    kinds = 7
    for start in range(0, CONNECTIONS, AT_ONCE):
        results = await asyncio.gather(*(_client(port, i % kinds) for i in range(start, start + AT_ONCE)))
        for result in results:
            tally[result] = tally.get(result, 0) + 1
    return tally


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("storm"), config=CONFIG) as s:
        yield s


def test_the_server_outlives_a_storm_of_rude_clients(server: ServerProcess) -> None:
    tally = asyncio.run(_storm(server.port))
    behaved = CONNECTIONS // 7 * 2 + min(CONNECTIONS % 7, 2)
    assert tally == {"ok": behaved, "left": CONNECTIONS - behaved}
    # Still serving, at once.
    after = asyncio.run(_client(server.port, 0))
    assert after == "ok"
    log = server.log()
    assert "Traceback" not in log, log[-3000:]
    assert "ERROR" not in log, log[-3000:]
