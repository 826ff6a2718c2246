"""The direct write of one body chunk of a streamed response (the fast path's last hop).

A streamed token goes out as one chunk of the response's chunked body. uvicorn's ``send`` does
that after a coroutine, a message dict and a dozen checks per call; :class:`ChunkWriter` does only
what ``send`` does for a body chunk of a started, chunked, unfinished response on a connection
that is not paused: frame it and hand it to the transport. In any other state it refuses (returns
False) and the caller goes through ``send``, which waits on a paused transport (backpressure) or
ends the response.

It reads uvicorn's request-response cycle (httptools_impl.RequestResponseCycle) by duck typing:
the attributes in :data:`_CYCLE_STATE`, checked once; a uvicorn without them gets no writer and
every chunk goes through ``send``. Nothing here imports uvicorn.
"""

from __future__ import annotations

import weakref
from typing import Any

#: The scope key of the request's :class:`ChunkWriter` (absent under another server or with the fast path off).
CHUNK_WRITER_KEY = "llmsim.chunk_writer"
#: The cycle's state ChunkWriter reads: uvicorn internals, so a uvicorn without one of them gets no
#: writer (every chunk through ``send``) rather than a wrong one.
_CYCLE_STATE = ("flow", "disconnected", "response_started", "response_complete", "chunked_encoding", "transport")


class ChunkWriter:
    """One body chunk of the response of one request, written straight to its transport when ``send`` would do just that."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: Any) -> None:
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


def writable(cycle: object) -> bool:
    """Whether this uvicorn's cycle has the state :class:`ChunkWriter` reads (checked on the first, once)."""
    global _WRITABLE
    if _WRITABLE is None:
        _WRITABLE = all(hasattr(cycle, name) for name in _CYCLE_STATE) and hasattr(
            getattr(cycle, "flow", None), "write_paused"
        )
    return _WRITABLE


_WRITABLE: bool | None = None
