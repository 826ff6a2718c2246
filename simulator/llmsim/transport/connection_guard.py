"""uvicorn's httptools protocol with the connection limits (:class:`~llmsim.transport.limits.ConnectionLimits`).

- Header size: the bytes of a request's head (request line and headers, up to the blank line)
  are counted as they are read, before the parser buffers them; past ``max_header_bytes`` the
  client gets ``431 Request Header Fields Too Large`` and the connection closes.
- Request timeout: a timer from the connection's opening, and from each request's first byte,
  to its last (headers and body); when it fires, ``408 Request Timeout`` and a close while the
  headers are incomplete, a close alone when not a byte came (an idle connection) or once the
  app has the request (it then sees a disconnect).
  Between requests uvicorn's keep-alive timer (``timeout_keep_alive``, 5 s) closes idle
  connections, as before.
- Connection cap: a connection beyond ``max_connections`` gets ``503 Service Unavailable`` and is
  closed as soon as it is accepted, so descriptors never run out under the server's feet.

Relies on uvicorn's internals as :mod:`.http_protocol` does (``HttpToolsProtocol``'s parser
callbacks, ``connections``, ``cycle``, ``transport``); loaded only through :mod:`.server`.
"""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from llmsim.transport.limits import ConnectionLimits

logger = logging.getLogger(__name__)

_END_OF_HEAD = b"\r\n\r\n"


def _refusal(status: bytes) -> bytes:
    return b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


TOO_LARGE = _refusal(b"431 Request Header Fields Too Large")
TIMED_OUT = _refusal(b"408 Request Timeout")
UNAVAILABLE = _refusal(b"503 Service Unavailable")


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` enforcing :attr:`limits` on each connection."""

    limits = ConnectionLimits()
    # Counting the head of a request: from the connection's start or the last request's end to
    # the blank line ending the headers (False: in a body, or a response under way).
    _in_head = True
    _head_bytes = 0
    # The last bytes of the head read so far: the blank line may be split across reads.
    _head_tail = b""
    _timer: asyncio.TimerHandle | None = None
    _refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        cap = self.limits.max_connections
        if cap is not None and len(self.connections) > cap:
            self._refuse(UNAVAILABLE)
            logger.debug("connection refused: %d open, the cap is %d", len(self.connections) - 1, cap)
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_head:
            seen = self._head_tail + data
            end = seen.find(_END_OF_HEAD)
            if end >= 0:
                # Bytes of this read past the head (a body, a pipelined request) are not headers.
                size = self._head_bytes + end + len(_END_OF_HEAD) - len(self._head_tail)
                self._in_head = False
            else:
                size = self._head_bytes + len(data)
                self._head_bytes = size
                self._head_tail = seen[-(len(_END_OF_HEAD) - 1) :]
            if size > self.limits.max_header_bytes:
                self._refuse(TOO_LARGE)
                return
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._timer is None:
            self._arm()  # a request on a kept-alive connection: its bytes have a deadline too

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()  # all of it arrived
        # What follows is the next request's head.
        self._in_head = True
        self._head_bytes = 0
        self._head_tail = b""

    def _arm(self) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self.limits.request_timeout_s, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _waiting_for_bytes(self) -> bool:
        """Whether the request is still incomplete for want of the client's bytes (not ours to parse)."""
        return True

    def _timed_out(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if not self._waiting_for_bytes():
            self._arm()  # read already, its parse deferred: not the client's fault
            return
        if self._in_head and self._head_bytes == 0:
            # Not a byte of a request: closed without a word, as an idle keep-alive connection
            # is (a client that pooled it sees a close, not an answer to a request it never sent).
            self._refused = True
            self.transport.close()
        elif self._in_head:
            self._refuse(TIMED_OUT)
        else:
            # The app has the request and may be answering: no status line of ours in its way.
            self.transport.close()

    def _refuse(self, answer: bytes) -> None:
        self._refused = True
        self._disarm()
        self.transport.write(answer)
        self.transport.close()


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for uvicorn's ``http`` setting, enforcing ``limits``."""
    return type("LimitedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {"limits": limits})
