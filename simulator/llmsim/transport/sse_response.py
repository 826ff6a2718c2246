"""A server-sent-event response written straight to the server's ``send``, one write per due batch.

Starlette's StreamingResponse costs several coroutine hops per chunk: its own loop over an async
generator of ours, then the ``send`` wrapper of every middleware on the way out (FastAPI has four
or five). :class:`SSEResponse` pulls events from the engine iterator itself, encodes
them and hands the bytes to the ``send`` it is called with; :class:`~llmsim.api.app.LlmsimApp`
calls it with the server's own ``send``. It watches for the client's disconnect with one task
(Starlette runs an anyio task group) and cancels the pull at once, so the engine frees the request.

Coalescing: each pull first runs the engine iterator up to its next wait without awaiting. When
the next token is already due (the stream is behind: a late wake-up, a slow loop), it does not
wait at all; such tokens are batched and written together right before the stream next waits,
or once :data:`MAX_BATCH_CHUNKS` have piled up. The bytes are the same sequence of SSE events;
only their split into writes changes. A token that arrives after a wait is written at once.

Backpressure: every write goes through the server's ``send``, which waits while the transport
is paused (the peer's buffers are full), or through llmsim serve's chunk writer, which refuses
to write on a paused transport (the token then goes through ``send``); and a stream never
encodes more than one batch ahead of what it has handed over. So one connection holds at most the transport's high-water mark
plus one batch, and a slow or stalled reader costs the others nothing.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import Any, Generic, Protocol, TypeVar, cast

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from llmsim.engine.release_gate import ReleaseGate
from llmsim.transport.chunk_writer import CHUNK_WRITER_KEY, ChunkWriter

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class EventSource(Protocol[T_co]):
    """What the response pulls events from: an engine's token stream, or several merged."""

    def __anext__(self) -> Awaitable[T_co]: ...

    async def aclose(self) -> None: ...


class StreamBody(Protocol):
    """What a stream says besides its per-event chunks."""

    def tail(self) -> bytes:
        """The last bytes after the events ran out."""
        ...

    def error(self, exc: Exception) -> bytes | None:
        """The last bytes after the events failed with ``exc``; None to let it propagate."""
        ...

    def close(self) -> None:
        """Called once, however the stream ended (the client left included)."""
        ...


@types.coroutine
def _resume(step: Coroutine[Any, Any, T], waiting_on: Any) -> Generator[Any, Any, T]:
    """Finish awaiting ``step``, whose first ``send(None)`` already yielded ``waiting_on``.

    Exactly what ``await`` would have done from there (``yield from``): the task waits on what
    the step waits on, and a cancellation or close is passed down into it.
    """
    value = waiting_on
    while True:
        try:
            sent = yield value
        except GeneratorExit:
            step.close()
            raise
        except BaseException as exc:
            try:
                value = step.throw(exc)
            except StopIteration as done:
                result: T = done.value
                return result
        else:
            try:
                value = step.send(sent)
            except StopIteration as done:
                result = done.value
                return result


#: Most chunks written in one go while a stream is behind (a few KB): bounds what one connection
#: holds beyond the transport's buffer, and how long one stream keeps the event loop from the
#: others (≈ 50 µs of encoding).
MAX_BATCH_CHUNKS = 16


class SSEResponse(Response, Generic[T]):
    """``text/event-stream`` of ``encode(event)`` for each event, then ``body.tail()``.

    Parameters
    ----------
    events:
        The engine's token stream (or several merged). Closed when the response ends, however it ends.
    encode:
        The SSE bytes of one event.
    body:
        The closing bytes, the error event, and the end-of-stream hook.
    headers:
        Extra response headers; the content type is ``text/event-stream; charset=utf-8``.
    prepare, commit:
        ``encode`` in two halves, given together or not at all: ``prepare(event)`` makes the bytes
        and changes nothing (an engine that pushes shows each event ahead of its release, while it
        waits for the deadline, and the event may then never be released); ``commit(event)``
        records what ``encode`` records, when the prepared bytes are written.
    gate:
        The engines' pending token releases (:class:`~llmsim.engine.release_gate.ReleaseGate`):
        the work after the last write waits while one is at hand.
    head:
        Bytes written at once, before the first event (a stream that announces itself first).
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        events: EventSource[T],
        encode: Callable[[T], bytes],
        body: StreamBody,
        headers: Mapping[str, str] | None = None,
        prepare: Callable[[T], bytes] | None = None,
        commit: Callable[[T], None] | None = None,
        gate: ReleaseGate | None = None,
        head: bytes = b"",
    ) -> None:
        self.status_code = 200
        self._head = head
        self.background = None
        self.init_headers(headers)
        self._events = events
        self._encode = encode
        self._prepare_bytes = prepare
        self._commit = commit
        self._body = body
        self._send: Send | None = None
        # Set while the response waits on the engine: the only time a disconnect cancels it.
        self._pulling = False
        self._disconnected = False
        self._cancelled_by_disconnect = False
        # True while a write is under way (ours, or a pushed one the transport made wait):
        # pushes are refused meanwhile, so bytes never leave out of order.
        self._writing = False
        # A pushed write the transport made wait, finished by its own task.
        self._inflight: asyncio.Future[None] | None = None
        # The server's direct chunk write (llmsim serve's protocol), when it offers one.
        self._writer: ChunkWriter | None = None
        # The one event made ahead of its release (see _prepare): its bytes, and framed for the writer.
        self._ready: T | None = None
        self._ready_body = b""
        self._ready_framed = b""
        # The engines' pending releases: the work at the response's end (its records) gives way to them.
        self._gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        if self._head:
            await send({"type": "http.response.body", "body": self._head, "more_body": True})
        self._send = send
        self._writer = scope.get(CHUNK_WRITER_KEY)
        watcher = asyncio.create_task(self._watch(receive, task))
        attach = getattr(self._events, "attach", None)
        if attach is not None:
            ahead = self._prepare_bytes is not None and self._commit is not None
            attach(self._push, self._prepare if ahead else None)
        try:
            await self._stream(send)
        except asyncio.CancelledError:
            # Our own cancellation (the client left while we waited on the engine) ends the
            # response quietly, as Starlette's does; anyone else's goes on.
            if not self._cancelled_by_disconnect or task.uncancel() > 0:
                raise
        finally:
            watcher.cancel()
            if self._inflight is not None:
                self._inflight.cancel()
            try:
                await self._events.aclose()
            finally:
                self._body.close()

    def _prepare(self, event: T) -> None:
        """The engine shows a token ahead of its release: make its bytes now, while the engine
        waits for the deadline, so that :meth:`_push` is little more than the write.

        Never raises into the engine: a failure here meets ``encode`` again at the release.
        """
        if self._writing or self._disconnected:
            return  # it will be queued and pulled (or dropped): nothing to gain
        prepare = self._prepare_bytes
        assert prepare is not None
        try:
            body = prepare(event)
        except Exception:
            return
        self._ready = event
        self._ready_body = body
        self._ready_framed = ChunkWriter.frame(body) if self._writer is not None and body else b""

    def _push(self, event: T) -> bool:
        """The engine hands a token over at its release: write it now, from the engine's own pass.

        Refused (False: the engine queues it for :meth:`_stream`) while another write is under
        way or after the client left. Never raises into the engine.
        """
        if self._writing or self._disconnected:
            return False
        send = self._send
        assert send is not None
        writer = self._writer
        try:
            # Per-token path at the step's deadline: the bytes made ahead, when they were.
            if event is self._ready:
                self._ready = None
                commit = self._commit
                assert commit is not None
                commit(event)
                body = self._ready_body
                # The server's own chunk write when it applies (not paused, not ended): no coroutine.
                if writer is not None and writer.write_framed(self._ready_framed):
                    return True
            else:
                body = self._encode(event)
                if writer is not None and writer.write(body):
                    return True
            write = cast(
                Coroutine[Any, Any, None], send({"type": "http.response.body", "body": body, "more_body": True})
            )
            waiting_on = write.send(None)
        except StopIteration:
            return True  # written: the common case
        except Exception:
            return False  # the consumer task meets the same error where it can be handled
        # The server's send waits (the transport is paused: a slow reader). Finish this write in a
        # task; until then further tokens queue up and the consumer waits for it before writing.
        self._writing = True
        self._inflight = asyncio.ensure_future(self._finish(write, waiting_on))
        return True

    async def _finish(self, write: Coroutine[Any, Any, None], waiting_on: Any) -> None:
        try:
            await _resume(write, waiting_on)
        finally:
            self._writing = False

    async def _write(self, send: Send, body: bytes, more_body: bool = True) -> None:
        inflight = self._inflight
        if inflight is not None:
            self._inflight = None
            await inflight
        self._writing = True
        try:
            await send({"type": "http.response.body", "body": body, "more_body": more_body})
        finally:
            self._writing = False

    async def _watch(self, receive: Receive, task: asyncio.Task[Any]) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._disconnected = True
        # Only a wait on the engine is cancelled; a write in progress ends by itself (the server
        # turns writes after a disconnect into no-ops) and the stream checks the flag after it.
        if self._pulling:
            self._cancelled_by_disconnect = True
            task.cancel()

    async def _stream(self, send: Send) -> None:
        pull = self._events.__anext__
        encode = self._encode
        due: list[bytes] = []
        try:
            # Per-token loop of pulled tokens: no await except the engine's wait and the write.
            while True:
                # Both kinds of source return a coroutine-like awaitable with send/throw.
                step = cast(Coroutine[Any, Any, T], pull())
                try:
                    waiting_on = step.send(None)
                except StopIteration as ready:
                    # Due already: the stream is behind. Batch it with the others that are due.
                    due.append(encode(ready.value))
                    if len(due) >= MAX_BATCH_CHUNKS:
                        # The server's send waits while the transport is paused (a slow reader), so
                        # a full batch is where backpressure holds this stream. It returns at once
                        # when the peer keeps up: yield the loop anyway, or a stream whose every
                        # token is due (the instant engine) would run to its end in one turn.
                        await self._write(send, b"".join(due))
                        due.clear()
                        if self._disconnected:
                            return
                        await asyncio.sleep(0)
                    continue
                if due:
                    await self._write(send, b"".join(due))
                    due.clear()
                    if self._disconnected:
                        return
                self._pulling = True
                try:
                    event = await _resume(step, waiting_on)
                finally:
                    self._pulling = False
                await self._write(send, encode(event))
                if self._disconnected:
                    return
        except StopAsyncIteration:
            due.append(self._body.tail())
        except Exception as exc:
            last = self._body.error(exc)
            if last is None:
                raise
            due.append(last)
        # The end of the stream in one write, with the chunked-encoding terminator.
        await self._write(send, b"".join(due), more_body=False)
        gate = self._gate
        if gate is not None:
            # The client has everything; what is left (closing the source, the request's records)
            # is a slice of work that a burst of streams ending together would otherwise run all
            # at once, ahead of the next step's release.
            await gate.give_way()
