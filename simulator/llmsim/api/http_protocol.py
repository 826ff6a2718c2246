"""uvicorn's HTTP protocol (httptools), stamping each request's arrival as its first byte is parsed.

The ASGI app runs in a task of its own, which starts only after whatever else the event loop had
queued: a step releasing a token to 64 streams takes a millisecond or two. A stamp taken there
would place the request that much later on the simulated timeline than its client sent it, and
now and then past a step start it had made: the client's TTFT would grow by a step. The stamp is
taken here instead, when uvicorn parses the request line, and LlmsimApp uses it.
"""

from __future__ import annotations

import time

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: The scope key LlmsimApp reads (on the engines' clock: time.monotonic, as MonotonicClock's default).
ARRIVAL_KEY = "llmsim.arrival"


class StampingHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` with the request's arrival stamp in its scope."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[ARRIVAL_KEY] = time.monotonic()  # type: ignore[literal-required]
