"""A connection dropped mid-response (the ``abort_mid_stream`` fault): what the client sees is a truncated body.

uvicorn closes the transport when the app raises after the response started, so raising
:class:`DropConnection` under a streaming response leaves the client with an incomplete chunked
body, not a clean end; under a non-streamed one, with the status line and headers only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Generic, TypeVar

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from llmsim.transport.sse_response import EventSource

T = TypeVar("T")


class DropConnection(BaseException):
    """Raised under a response to have the server drop the connection mid-response.

    NOTE: a BaseException, like CancelledError, so that no ``except Exception`` on the way out
    (SSEResponse's error event, LlmsimApp's plain 500, Starlette's middleware) turns it into a
    response; :func:`quiet_dropped_connections` keeps it out of the server's error log.
    """


class DroppingEvents(Generic[T]):
    """An event source that ends in a dropped connection after ``limit`` events.

    Before raising :class:`DropConnection` it suspends once, so a response that batched events
    already due writes them first (SSEResponse writes what it holds before it waits).
    """

    __slots__ = ("_events", "_left")

    def __init__(self, events: EventSource[T], limit: int) -> None:
        self._events = events
        self._left = limit

    def __aiter__(self) -> DroppingEvents[T]:
        return self

    async def __anext__(self) -> T:
        if self._left <= 0:
            await asyncio.sleep(0)
            raise DropConnection
        self._left -= 1
        return await self._events.__anext__()

    async def aclose(self) -> None:
        await self._events.aclose()


class DroppedResponse(Response):
    """A non-streamed response cut off: the status line and headers go out, then the connection drops."""

    def __init__(self) -> None:
        super().__init__(status_code=200, media_type="application/json")
        # No content-length: the body would follow in chunks; none comes.
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        raise DropConnection


class _QuietDrops(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and record.exc_info[0] is DropConnection)


def quiet_dropped_connections() -> None:
    """Keep uvicorn from logging each injected drop as an "Exception in ASGI application" (idempotent)."""
    server_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietDrops) for f in server_log.filters):
        server_log.addFilter(_QuietDrops())
