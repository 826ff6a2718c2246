"""What one connection may hold of the server: header bytes, time to send its request, a descriptor.

uvicorn with httptools (the protocol vLLM serves with too) has no limit on a request's header
size (httptools buffers a header until it ends: a 256 MiB one was accepted), no time limit on a
request whose headers or body never finish (its keep-alive timer runs only between requests, and
stops at the first byte), and no cap on connections short of the process's descriptor limit
(idle connections past it made ``/health`` fail). :mod:`.connection_guard` applies these.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

#: Header bytes of one request (request line included) before it gets 431. Above the defaults of
#: the proxies and clients in front of a replica (Node 16 KiB, nginx 4 × 8 KiB, uvicorn's h11
#: 16 KiB); vLLM's h11 counterpart (--h11-max-incomplete-event-size) is 4 MiB, but vLLM serves with
#: httptools when installed, which has none.
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
#: Seconds a connection gets to deliver a whole request (headers and body), counted from its
#: opening or from its request's first byte. nginx's client_header_timeout and client_body_timeout
#: default to 60 s each; uvicorn and vLLM have none.
DEFAULT_REQUEST_TIMEOUT_S = 30.0
#: Descriptors left for everything but client connections (listening socket, engines' timerfd and
#: epoll, ZMQ sockets, logs) when the connection cap is derived from the open-file limit.
RESERVED_DESCRIPTORS = 100


def default_max_connections() -> int:
    """The open-file limit (soft) less :data:`RESERVED_DESCRIPTORS`: refused with 503 before accept fails."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(16, soft - RESERVED_DESCRIPTORS)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What :mod:`.connection_guard` enforces per connection (``llmsim serve`` flags)."""

    # Header bytes of one request, request line included; more gets 431 and a close.
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    # Seconds for a request's headers and body to arrive; then 408 and a close (a close alone when
    # nothing came, or once the app has the request).
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    # Open client connections; one more is answered 503 and closed at once (None: no cap).
    max_connections: int | None = None

    def __post_init__(self) -> None:
        if self.max_header_bytes < 1024:
            raise ValueError(f"max_header_bytes must be >= 1024, got {self.max_header_bytes}")
        if self.request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {self.max_connections}")
