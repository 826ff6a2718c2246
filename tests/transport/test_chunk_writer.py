"""ChunkWriter: a body chunk written straight to uvicorn's transport, only where uvicorn's send would do just that.

A real uvicorn RequestResponseCycle and FlowControl over a transport that records its writes.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from llmsim.transport.chunk_writer import ChunkWriter


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        pass


def cycle() -> tuple[RequestResponseCycle, RecordingTransport]:
    transport = RecordingTransport()
    scope: Any = {"type": "http", "method": "POST", "path": "/v1/completions", "http_version": "1.1"}
    c = RequestResponseCycle(
        scope=scope,
        transport=transport,
        flow=FlowControl(transport),
        logger=logging.getLogger("test"),
        access_logger=logging.getLogger("test.access"),
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=True,
        on_response=lambda: None,
    )
    return c, transport


async def started() -> tuple[RequestResponseCycle, RecordingTransport]:
    c, transport = cycle()
    await c.send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    transport.written.clear()
    return c, transport


async def test_a_chunk_is_framed_as_http_chunked_encoding() -> None:
    c, transport = await started()
    assert ChunkWriter(c).write(b"data: hello\n\n")
    # 13 bytes: "d" in hex, CRLF, the bytes, CRLF (RFC 9112 7.1).
    assert transport.written == [b"d\r\ndata: hello\n\n\r\n"]
    # The response goes on through send as usual, and ends with the terminator.
    await c.send({"type": "http.response.body", "body": b"", "more_body": False})
    assert transport.written[-1] == b"0\r\n\r\n"


async def test_an_empty_chunk_writes_nothing() -> None:
    c, transport = await started()
    assert ChunkWriter(c).write(b"")
    assert transport.written == []


async def test_it_refuses_before_the_response_started() -> None:
    c, transport = cycle()
    assert not ChunkWriter(c).write(b"x")
    assert transport.written == []


async def test_it_refuses_on_a_paused_transport_so_send_applies_backpressure() -> None:
    c, transport = await started()
    c.flow.pause_writing()
    assert not ChunkWriter(c).write(b"x")
    assert transport.written == []


async def test_it_refuses_after_a_disconnect_or_the_end_of_the_response() -> None:
    c, transport = await started()
    c.disconnected = True
    assert not ChunkWriter(c).write(b"x")
    c, transport = await started()
    await c.send({"type": "http.response.body", "body": b"", "more_body": False})
    transport.written.clear()
    assert not ChunkWriter(c).write(b"x")
    assert transport.written == []


async def test_it_refuses_a_response_with_a_content_length() -> None:
    c, transport = cycle()
    await c.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"1")]})
    transport.written.clear()
    assert not ChunkWriter(c).write(b"x")
    assert transport.written == []


def test_a_uvicorn_whose_cycle_lacks_the_state_gets_no_writer(monkeypatch: Any) -> None:
    # The writer reads uvicorn internals: a cycle without one of them (another uvicorn) means every
    # chunk goes through send, never a writer guessing at the state.
    from llmsim.transport import chunk_writer

    real, _ = cycle()
    monkeypatch.setattr(chunk_writer, "_WRITABLE", None)
    assert chunk_writer.writable(real) is True
    monkeypatch.setattr(chunk_writer, "_WRITABLE", None)
    del real.chunked_encoding
    assert chunk_writer.writable(real) is False


async def test_the_writer_in_its_cycles_scope_makes_no_reference_cycle() -> None:
    """A request's objects are freed when it ends (reference counting), not left to the garbage
    collector, whose pauses would then free them in bulk in the middle of a step's release."""
    c, _ = await started()
    writer = ChunkWriter(c)
    c.scope["llmsim.chunk_writer"] = writer  # type: ignore[typeddict-unknown-key]
    alive = weakref.ref(c)
    gc.disable()
    try:
        del c
        assert alive() is None  # freed at once, no collection needed
    finally:
        gc.enable()
    # A writer that outlives its request refuses: there is nothing left to write to.
    assert not writer.write(b"data: late\n\n")
