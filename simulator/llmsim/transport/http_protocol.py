"""uvicorn's HTTP protocol (httptools), stamping each request's arrival as its first byte is parsed,
and offering the response a direct write of one body chunk.

The ASGI app runs in a task of its own, which starts only after whatever else the event loop had
queued: a step releasing a token to 64 streams takes a millisecond or two. A stamp taken there
would place the request that much later on the simulated timeline than its client sent it, and
now and then past a step start it had made: the client's TTFT would grow by a step. The stamp is
taken here instead, when uvicorn parses the request line, and LlmsimApp uses it.

With the engines' :class:`~llmsim.engine.release_gate.ReleaseGate`, a request read on an idle
connection while a token release is at hand is parsed after the release's pass, not before it:
its bytes are kept, the connection's reading paused, and the parse deferred to the gate (the
stamp is still the time they were read). Parsing runs in the loop's I/O callback, where no
task's ``give_way`` can hold it, and a burst of new requests (a closed loop's streams ending in
one step) would otherwise hold the step loop's wake-up for their whole parse.

Each request's scope also gets a :class:`~llmsim.transport.chunk_writer.ChunkWriter` for its
response's direct chunk writes. This module and :mod:`.connection_guard` (the connection limits,
which it extends) are the only ones that import uvicorn's internals (``HttpToolsProtocol``, its
``pipeline``, ``cycle`` and keep-alive timer): :mod:`.server` imports them lazily, and falls back
to uvicorn's own protocol when that fails.
"""

from __future__ import annotations

import asyncio
import math
import time

from llmsim.engine.release_gate import ReleaseGate
from llmsim.transport.arrival_watch import ARRIVAL_KEY, ArrivalWatch
from llmsim.transport.chunk_writer import CHUNK_WRITER_KEY, ChunkWriter, writable
from llmsim.transport.connection_guard import GuardedHttpToolsProtocol
from llmsim.transport.limits import ConnectionLimits


class StampingHttpToolsProtocol(GuardedHttpToolsProtocol):
    """``HttpToolsProtocol`` (with the connection limits) and the request's arrival stamp in its scope.

    With an :class:`ArrivalWatch` (:func:`stamping_protocol`), a keep-alive connection is watched
    while it waits for its next request, and the stamp is the earlier of the parse and the time
    a poll of the watch first saw the request's bytes (the loop was busy with a pass then).
    """

    arrival_watch: ArrivalWatch | None = None
    release_gate: ReleaseGate | None = None
    _fd = -1
    # Bytes read while a release was at hand, parsed after its pass (None: none kept), and when
    # they were read (the request's arrival bound).
    _kept: bytes | None = None
    _kept_at = math.inf

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        watch = self.arrival_watch
        if watch is not None and not self._refused:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                self._fd = sock.fileno()
                watch.watch(self._fd, self)  # waiting for its first request

    def connection_lost(self, exc: Exception | None) -> None:
        if self._fd >= 0 and self.arrival_watch is not None:
            self.arrival_watch.taken(self._fd, self)
        self._kept = None  # a request that never started: nothing to answer
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._kept is not None:
            # Reading is paused while bytes are kept; should the transport hand more over anyway,
            # they go after the kept ones, never ahead of them.
            self._kept += data
            return
        gate = self.release_gate
        if gate is not None and self._idle():
            now = time.monotonic()
            if gate.defer(self._parse_kept, now):
                self._kept = data
                self._kept_at = now
                # Uvicorn's keep-alive timer would close the connection with the request unparsed.
                self._unset_keepalive_if_required()
                self.transport.pause_reading()
                return
        super().data_received(data)

    def _waiting_for_bytes(self) -> bool:
        return self._kept is None  # kept bytes wait for us (a release's pass), not for the client

    def _idle(self) -> bool:
        """Between requests: no response under way, nothing pipelined (a request now is a new one)."""
        cycle = self.cycle
        return (cycle is None or cycle.response_complete) and not self.pipeline

    def _parse_kept(self) -> None:
        kept = self._kept
        if kept is None:
            return  # the connection was lost meanwhile
        gate = self.release_gate
        if gate is not None and gate.defer(self._parse_kept, self._kept_at):
            return  # the next release is at hand already: after its pass, then
        self._kept = None
        self.transport.resume_reading()
        super().data_received(kept)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        stamp = min(time.monotonic(), self._kept_at)
        self._kept_at = math.inf
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
        if cycle is not None and cycle.scope is self.scope and writable(cycle):
            self.scope[CHUNK_WRITER_KEY] = ChunkWriter(cycle)  # type: ignore[literal-required]


def stamping_protocol(
    watch: ArrivalWatch | None, gate: ReleaseGate | None = None, limits: ConnectionLimits | None = None
) -> type[StampingHttpToolsProtocol]:
    """The protocol class for uvicorn's ``http`` setting, its stamps helped by ``watch``, its
    parses of new requests deferred past ``gate``'s releases at hand, enforcing ``limits``."""
    if watch is None and gate is None and limits is None:
        return StampingHttpToolsProtocol
    attributes = {"arrival_watch": watch, "release_gate": gate, "limits": limits or ConnectionLimits()}
    return type("WatchedHttpToolsProtocol", (StampingHttpToolsProtocol,), attributes)
