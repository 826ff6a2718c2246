"""When a request's first bytes reached an idle connection while the event loop was busy.

A request's arrival is stamped when uvicorn's protocol parses its first byte
(:mod:`llmsim.transport.http_protocol`), which is when the event loop reads the socket. While the loop
runs the step loop's pass (every token of a step written, ≈25 µs a token on this project's VMs)
and the next step's planning, nothing is read: a request whose bytes came in during that
millisecond or so is stamped when it ends. With vLLM's async scheduling and a per-request
overhead of about a step (the calibrated profiles), the requests that arrive just after a step
boundary are the ones whose readiness falls right at the next step's admission cutoff, so a late
stamp there moves a request a whole step later: measured at 20 req/s on the embedded profile,
the simulated TTFT's median 0.25 ms above the prediction's, although the simulated timeline was
exact for the stamps it had.

The kernel's receive time is not reachable through the loop's transports (they ``read``; the
timestamp comes with ``recvmsg``'s control data). So an epoll set of our own holds the idle
connections (open, waiting for their next or first request), each registered for one report; the
step loop polls it (``epoll_wait`` with no timeout, one syscall) every few tokens of a pass and
around its planning, and the time of the first report is the request's arrival bound: the stamp
is the earlier of it and the parse. Off the step loop (an idle loop) the loop reads at once and
no poll is needed.
"""

from __future__ import annotations

import select
import time
import weakref
from contextlib import suppress

#: The scope key of a request's arrival stamp (on the engines' clock: time.monotonic, as
#: MonotonicClock's default), set by llmsim serve's protocol; LlmsimApp stamps the requests that
#: come without one (another server, the fast path off, in-process tests).
ARRIVAL_KEY = "llmsim.arrival"
#: epoll's flags for one report per idle period (re-armed when the connection is idle again).
_ONE_REPORT = getattr(select, "EPOLLIN", 0) | getattr(select, "EPOLLONESHOT", 0)


class ArrivalWatch:
    """Idle connections' sockets, and when a poll first saw bytes on each.

    ``watch`` a connection when it waits for a request, ``taken`` when its request begins (or it
    closes); ``poll`` from whatever holds the loop. Without epoll (not Linux) every call is a no-op
    and requests are stamped at their parse.
    """

    __slots__ = ("__weakref__", "_epoll", "_owners", "_seen")

    def __init__(self) -> None:
        self._epoll: select.epoll | None = None
        # fd -> the connection registered on it (a closed fd's number is reused by the next socket).
        self._owners: dict[int, object] = {}
        # fd -> time.monotonic() of the first poll that saw bytes on it.
        self._seen: dict[int, float] = {}

    def watch(self, fd: int, owner: object) -> None:
        """``owner``'s connection on ``fd`` now waits for its next request."""
        epoll = self._epoll
        if epoll is None:
            if not hasattr(select, "epoll"):
                return
            try:
                epoll = select.epoll()
            except OSError:  # out of descriptors: stamps at the parse, as without a watch
                return
            self._epoll = epoll
            weakref.finalize(self, epoll.close)
        if fd in self._owners:
            with suppress(OSError):
                epoll.unregister(fd)
        try:
            epoll.register(fd, _ONE_REPORT)
        except OSError:
            self._owners.pop(fd, None)
            return
        self._owners[fd] = owner
        self._seen.pop(fd, None)

    def taken(self, fd: int, owner: object) -> float | None:
        """``owner``'s connection on ``fd`` is no longer idle: the time a poll first saw its bytes, if one did."""
        if self._owners.get(fd) is not owner:
            return None
        del self._owners[fd]
        assert self._epoll is not None
        with suppress(OSError):  # closed already (the kernel dropped it from the set)
            self._epoll.unregister(fd)
        return self._seen.pop(fd, None)

    def poll(self) -> None:
        """Note the time for every idle connection whose bytes came in since the last poll."""
        epoll = self._epoll
        if epoll is None or not self._owners:
            return
        events = epoll.poll(0)
        if events:
            now = time.monotonic()
            seen = self._seen
            for fd, _ in events:
                seen.setdefault(fd, now)
