"""Call an ASGI app as a server would and record what it sends, with the (virtual) time of each message."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message


@dataclass
class Exchange:
    """One request: the messages the app sent, each with the loop time it was sent at."""

    sent: list[tuple[float, Message]] = field(default_factory=list)
    # Set it (or let a timer set it) to make the client go away.
    disconnect: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def start(self) -> Message:
        assert self.sent[0][1]["type"] == "http.response.start"
        return self.sent[0][1]

    @property
    def writes(self) -> list[bytes]:
        """The body of every ``http.response.body`` message, in order (one write each)."""
        return [m["body"] for _, m in self.sent if m["type"] == "http.response.body"]

    @property
    def body(self) -> bytes:
        return b"".join(self.writes)

    @property
    def complete(self) -> bool:
        return (
            bool(self.sent) and self.sent[-1][1]["type"] == "http.response.body" and not self.sent[-1][1]["more_body"]
        )


def http_scope(path: str, method: str = "POST", headers: Sequence[tuple[bytes, bytes]] = ()) -> dict[str, Any]:
    """``path`` may carry a query string (``/sleep?level=1``)."""
    path, _, query = path.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"test"), (b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("test", 80),
    }


async def call(
    app: ASGIApp,
    path: str,
    body: dict[str, Any] | None,
    exchange: Exchange | None = None,
    *,
    upload_s: float = 0.0,
    slow_writes: dict[int, float] | None = None,
    method: str = "POST",
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> Exchange:
    """POST ``body`` to ``path`` (None: the body was read already, for a bare response object).

    ``upload_s``: the body arrives that long after the call (a slow upload).
    ``slow_writes``: {n: seconds}: the n-th body write (0-based) takes that long to return, as a
    server applying back-pressure would.
    ``headers``: request headers besides host and content-type.
    """
    ex = exchange or Exchange()
    loop = asyncio.get_running_loop()
    delivered = body is None
    writes = 0

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            if upload_s:
                await asyncio.sleep(upload_s)
            delivered = True
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
        await ex.disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal writes
        ex.sent.append((loop.time(), message))
        if message["type"] == "http.response.body":
            delay = (slow_writes or {}).get(writes)
            writes += 1
            if delay:
                await asyncio.sleep(delay)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            ex.disconnect.set()  # as a server does once the response is complete

    await app(http_scope(path, method, headers), receive, send)
    return ex


async def respond(app: ASGIApp) -> Exchange:
    """Run a response object (an ASGI app of its own) for a request whose body was already read."""
    return await call(app, "/", None)
