"""Request work gives way to a token release that is about to be due.

One event loop serves both the step loop's releases and every request's own work (parsing,
planning, response start, the metrics at its end). That work comes in synchronous slices of a few
hundred microseconds each, and a burst of new requests (a closed loop whose streams end in the
same step) queues tens of them in one loop turn: the step loop's timer then fires on time, but its
wake-up waits behind the whole batch, and every token of the step leaves that late (measured at
128 streams: a step's wake-up lag at p99 19 ms, one step in four over 3 ms).

vLLM runs its API server and its engine core in two processes, so there a request's parsing never
holds a step's outputs. Here the request side asks the gate before each slice (:meth:`ReleaseGate.give_way`):
within ``margin`` of a pending release (or past it) it waits until the release pass is done,
so the loop stays free to wake the step loop at its deadline; otherwise it goes on at once.
Simulated times do not move: a request's arrival is stamped when its first byte is read, and it
reaches the scheduler only ``request_overhead_s`` later (the API server's work in vLLM), and
with async scheduling (vLLM's default) a step's admissions are decided when the step before it
starts. Held work is let go right after the pass; when some of it could still join the next step
(its arrival, plus the overhead, within that step's admission cutoff), the step loop gives it a
loop turn before it decides those admissions (:meth:`ReleaseGate.open` returns the earliest arrival).

Work that is not a task's slice (the HTTP protocol's parse of a request just read, in the event
loop's I/O callback, measured at 35-70 µs a request: a closed loop's 128 streams ending in one
step send 128 requests at once, ≈7 ms of callbacks no task can interrupt) is deferred instead:
:meth:`ReleaseGate.defer` keeps the callback and :meth:`ReleaseGate.open` queues it for after the pass.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

#: How long before a release request work stops starting new slices (seconds). Above the
#: largest slice measured on a loaded machine (a chat request's parse, plan and submit, ~0.5 ms),
#: so a slice started just before the margin still ends before the deadline.
DEFAULT_MARGIN = 0.0005


def _run_deferred(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        logger.exception("work deferred past a token release failed")


class ReleaseGate:
    """Pending release deadlines of the step loops on one event loop, and the request work waiting for them.

    The engines call :meth:`close` before sleeping to a release and :meth:`open` after its pass;
    request work awaits :meth:`give_way` before each slice. ``now`` is the engines' clock.
    """

    __slots__ = ("_deadlines", "_deferred", "_earliest", "_margin", "_now", "_waiters", "num_held")

    def __init__(self, now: Callable[[], float], margin: float = DEFAULT_MARGIN) -> None:
        if margin < 0:
            raise ValueError(f"margin must be >= 0, got {margin}")
        self._now = now
        self._margin = margin
        # Owner (a step loop) -> its next release deadline. One entry per engine at most.
        self._deadlines: dict[object, float] = {}
        # One future per waiting slice of request work (its own: a waiter cancelled because its
        # client left must not cancel the others), all set by the pass.
        self._waiters: list[asyncio.Future[None]] = []
        # Callbacks held back by defer(), queued in order by the pass's open().
        self._deferred: list[Callable[[], None]] = []
        # The earliest arrival stamp among waiting work that has yet to reach an engine.
        self._earliest = math.inf
        # Slices of request work held back so far (the tests and the bench read it).
        self.num_held = 0

    def close(self, owner: object, deadline: float) -> None:
        """``owner`` will release tokens at ``deadline``: request work stops ``margin`` before it."""
        self._deadlines[owner] = deadline

    def open(self, owner: object) -> float:
        """``owner``'s release is done (or it stopped): let the waiting work go, unless another
        engine's release is at hand. Returns the earliest arrival stamp of the work let go that
        has yet to be submitted (``inf``: none), for the step loop to decide whether that work
        could still join its next step."""
        self._deadlines.pop(owner, None)
        waiters = self._waiters
        deferred = self._deferred
        if not (waiters or deferred) or self._due():
            return math.inf  # nobody waits, or another engine's release is still at hand
        self._waiters = []
        self._deferred = []
        earliest, self._earliest = self._earliest, math.inf
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        if deferred:
            # Each in a loop turn's callback of its own, as when it was first called: the pass
            # returns before any of them runs, and each may defer itself again (the next release
            # is then at hand), so a burst let go at once still stops at the next margin.
            loop = asyncio.get_running_loop()
            for callback in deferred:
                loop.call_soon(_run_deferred, callback)
        return earliest

    def defer(self, callback: Callable[[], None], arrival: float | None = None) -> bool:
        """Keep ``callback`` for after the release at hand (True), or refuse (False: call it now).

        For synchronous work that cannot await :meth:`wait` (an I/O callback); the pass's
        :meth:`open` queues each in a loop callback of its own, in the order deferred.
        ``arrival``: as for :meth:`wait`.
        """
        if not self._hold(arrival):
            return False
        self._deferred.append(callback)
        return True

    async def give_way(self, arrival: float | None = None) -> None:
        """Return once no release is at hand: at once (most calls), or after the passes due.

        Work let go after one release checks again, so a pile of it let go at once still stops
        at the next release's margin. ``arrival``: as for :meth:`wait`.
        """
        while (held := self.wait(arrival)) is not None:
            await held

    def wait(self, arrival: float | None = None) -> Awaitable[None] | None:
        """Something to await before a slice of request work, or None to go on at once (most calls).

        ``arrival``: the request's arrival stamp, when the slice ends in its submission to an engine.
        """
        if not self._hold(arrival):
            return None
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    def _hold(self, arrival: float | None) -> bool:
        """Whether work must be held now (a release is at hand); if so, counted and its arrival noted."""
        if not self._deadlines or not self._due():
            return False
        self.num_held += 1
        if arrival is not None and arrival < self._earliest:
            self._earliest = arrival
        return True

    def _due(self) -> bool:
        return bool(self._deadlines) and self._now() >= min(self._deadlines.values()) - self._margin
