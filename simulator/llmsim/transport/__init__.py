"""The live transport: how a released token leaves the process, and how a request's bytes come in.

Between the engines (which decide *when* a token is due, on an injected clock) and the API
(which decides *what* is said), this package owns the bytes on the wire under uvicorn: the
arrival stamp at a request's first byte, the deferral of a new request's parse past a token
release at hand, the server-sent-event response that an engine pushes tokens into, the direct
chunk write, backpressure, and the dropped connection of the fault injector, and the limits on what one connection may hold
(header bytes, time to send its request, a descriptor). docs/transport.md
traces a token from the clock to the socket and lists the uvicorn and Starlette internals relied
on, with the versions pinned in pyproject.toml.

Limits: it knows no routes, models, pydantic or metrics; of the engines it uses only the
:class:`~llmsim.engine.release_gate.ReleaseGate`. Only :mod:`.http_protocol` and
:mod:`.connection_guard` import uvicorn's internals, and only
:func:`~llmsim.transport.server.http_setting` imports them (lazily: on a uvicorn that moved
them, nothing else here touches them).
"""

from llmsim.transport.arrival_watch import ARRIVAL_KEY, ArrivalWatch
from llmsim.transport.dropped_connection import (
    DropConnection,
    DroppedResponse,
    DroppingEvents,
    quiet_dropped_connections,
)
from llmsim.transport.limits import ConnectionLimits, default_max_connections
from llmsim.transport.server import FAST_PATH_ENV, fast_path_enabled, http_setting
from llmsim.transport.sse_response import EventSource, SSEResponse, StreamBody

__all__ = [
    "ARRIVAL_KEY",
    "FAST_PATH_ENV",
    "ArrivalWatch",
    "ConnectionLimits",
    "DropConnection",
    "DroppedResponse",
    "DroppingEvents",
    "EventSource",
    "SSEResponse",
    "StreamBody",
    "default_max_connections",
    "fast_path_enabled",
    "http_setting",
    "quiet_dropped_connections",
]
