"""uvicorn's HTTP protocol (httptools), stamping each request's arrival as its first byte is parsed,
and offering the response a direct write of one body chunk.

The ASGI app runs in a task of its own, which starts only after whatever else the event loop had
queued: a step releasing a token to 64 streams takes a millisecond or two. A stamp taken there
would place the request that much later on the simulated timeline than its client sent it, and
now and then past a step start it had made: the client's TTFT would grow by a step. The stamp is
taken here instead, when uvicorn parses the request line, and LlmsimApp uses it.

The chunk writer (:data:`CHUNK_WRITER_KEY`): a streamed token goes out as one chunk of the
response's chunked body. uvicorn's ``send`` does that after a coroutine, a message dict and a
dozen checks per call; :class:`ChunkWriter` does only what ``send`` does for a body chunk of a
started, chunked, unfinished response on a connection that is not paused: frame it and hand it to
the transport. In any other state it refuses (returns False) and the caller goes through ``send``,
which waits on a paused transport (backpressure) or ends the response.
"""

from __future__ import annotations

import asyncio
import time
import weakref

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from llmsim.api.arrival_watch import ArrivalWatch

#: The scope key LlmsimApp reads (on the engines' clock: time.monotonic, as MonotonicClock's default).
ARRIVAL_KEY = "llmsim.arrival"
#: The scope key of the request's :class:`ChunkWriter` (absent under another server).
CHUNK_WRITER_KEY = "llmsim.chunk_writer"
#: The cycle's state ChunkWriter reads: uvicorn internals, so a uvicorn without one of them gets no
#: writer (every chunk through ``send``) rather than a wrong one.
_CYCLE_STATE = ("flow", "disconnected", "response_started", "response_complete", "chunked_encoding", "transport")


class ChunkWriter:
    """One body chunk of the response of one request, written straight to its transport when ``send`` would do just that."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: RequestResponseCycle) -> None:
        # Weak: the writer sits in the cycle's own scope, and a strong reference back would make
        # every request a reference cycle (scope -> writer -> cycle -> scope), freed only by the
        # garbage collector, in bulk, in a pause that delays a step's release.
        self._cycle = weakref.ref(cycle)

    def write(self, body: bytes) -> bool:
        """Write ``body`` as the next chunk, or refuse (False) where ``send`` must decide."""
        return self.write_framed(self.frame(body) if body else b"")

    @staticmethod
    def frame(body: bytes) -> bytes:
        """``body`` as one chunk of a chunked body, as uvicorn's send frames it
        (httptools_impl.RequestResponseCycle.send; RFC 9112 7.1); made ahead by a response that
        prepares its chunks."""
        return b"%x\r\n%b\r\n" % (len(body), body)

    def write_framed(self, framed: bytes) -> bool:
        """Write a chunk :meth:`frame` made (b"" writes nothing), or refuse (False) where ``send`` must decide."""
        cycle = self._cycle()
        if (
            cycle is None
            or cycle.flow.write_paused
            or cycle.disconnected
            or not cycle.response_started
            or cycle.response_complete
            or not cycle.chunked_encoding
        ):
            return False
        if framed:
            cycle.transport.write(framed)
        return True


class StampingHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` with the request's arrival stamp in its scope.

    With an :class:`ArrivalWatch` (:func:`stamping_protocol`), a keep-alive connection is watched
    while it waits for its next request, and the stamp is the earlier of the parse and the time
    a poll of the watch first saw the request's bytes (the loop was busy with a pass then).
    """

    arrival_watch: ArrivalWatch | None = None
    _fd = -1

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        watch = self.arrival_watch
        if watch is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                self._fd = sock.fileno()
                watch.watch(self._fd, self)  # waiting for its first request

    def connection_lost(self, exc: Exception | None) -> None:
        if self._fd >= 0 and self.arrival_watch is not None:
            self.arrival_watch.taken(self._fd, self)
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        stamp = time.monotonic()
        if self._fd >= 0 and self.arrival_watch is not None:
            seen = self.arrival_watch.taken(self._fd, self)
            if seen is not None and seen < stamp:
                stamp = seen
        self.scope[ARRIVAL_KEY] = stamp  # type: ignore[literal-required]

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Idle again (kept alive, nothing pipelined): its next request's bytes are watched for.
        if self._fd >= 0 and self.arrival_watch is not None and not self.transport.is_closing() and not self.pipeline:
            self.arrival_watch.watch(self._fd, self)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        # Not on an upgrade, which makes no cycle.
        if cycle is not None and cycle.scope is self.scope and _writable(cycle):
            self.scope[CHUNK_WRITER_KEY] = ChunkWriter(cycle)  # type: ignore[literal-required]


def stamping_protocol(watch: ArrivalWatch | None) -> type[StampingHttpToolsProtocol]:
    """The protocol class for uvicorn's ``http`` setting, its stamps helped by ``watch``."""
    if watch is None:
        return StampingHttpToolsProtocol
    return type("WatchedHttpToolsProtocol", (StampingHttpToolsProtocol,), {"arrival_watch": watch})


def _writable(cycle: RequestResponseCycle) -> bool:
    """Whether this uvicorn's cycle has the state :class:`ChunkWriter` reads (checked on the first, once)."""
    global _WRITABLE
    if _WRITABLE is None:
        _WRITABLE = all(hasattr(cycle, name) for name in _CYCLE_STATE) and hasattr(cycle.flow, "write_paused")
    return _WRITABLE


_WRITABLE: bool | None = None
