"""Clients that misbehave on purpose, shared by the tests and the benchmarks."""

from __future__ import annotations

import asyncio
import json
import socket


async def stalled_stream(port: int, max_tokens: int) -> asyncio.StreamWriter:
    """Send one streamed completion of ``max_tokens`` instant tokens and never read the answer (a
    small receive window, so the server's writes back up after a few kilobytes)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    _, writer = await asyncio.open_connection(sock=sock)
    body = json.dumps(
        {"model": "instant-model", "prompt": "hi", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    ).encode()
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()
    return writer
