"""A clock whose sleeps end at the deadline's microsecond: a Linux timerfd instead of the loop's timers.

uvloop's timers (libuv's) count whole milliseconds: a timer fires when the loop's cached
millisecond time reaches it, and the loop's ``epoll_wait`` sleeps whole milliseconds too. So a
wake-up lands anywhere from ~1.5 ms early to ~1 ms late, and :class:`MonotonicClock` (which must
never return early) waits out the early ones with a second timer: a step wakes 0-2 ms after its
deadline (≈0.6 ms at the median on a quiet server), whatever the server's load. That is most of the scheduler engine's lag
on a quiet server, and it reaches the client as TTFT and ITL that ``llmsim plan`` does not predict.

A timerfd armed at the absolute ``CLOCK_MONOTONIC`` nanosecond (``time.monotonic``'s clock) and
registered as a reader on the loop becomes readable at the deadline; the loop wakes for it at
once. One timerfd per clock serves every sleeper (a heap of deadlines; the fd is armed at the
earliest), so a sleep costs one ``timerfd_settime`` and, on waking, one ``read``: right for the
scheduler's step loop (one sleep per step), not for an engine that sleeps once per token.

The fd fires on time, but the loop runs its reader later: on a virtual machine a wake-up from an
idle loop is late by a fraction of a millisecond (the hypervisor's), on every step of a lightly
loaded server. So the timer is armed a *lead* ahead of the deadline, the median of the last 32
wake-ups' lateness (at most :data:`MAX_LEAD_S`), and the sleeper spins on the clock for whatever
is left when it wakes early. Half the wake-ups then land at the deadline after a short spin, the
rest late only by what exceeds the lead (bench/bench_live_timing.py measures the wake-up lag and
the spin's cost). While it spins the loop reads nothing, so the spin calls ``spin`` (the request
side's arrival poll, see transport/arrival_watch.py).

:func:`precise` returns one when the platform has timerfd and the clock is the real
``time.monotonic`` (a test's virtual-time clock is kept as it is).
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import math
import os
import sys
import time
import weakref
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from llmsim.engine.clock import Clock, MonotonicClock

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
# Earlier than this is float rounding of the timeline (time.monotonic's float of the nanosecond).
_ON_TIME_S = 1e-6
#: Wake-ups measured per estimate of the lead.
WAKE_WINDOW = 32
#: Most the timer is armed ahead of a deadline: a loop held up by work of its own (its wake-ups
#: late for that reason, not the host's) never makes a sleeper spin longer than this.
MAX_LEAD_S = 300e-6


def wake_lead(latencies: list[float]) -> float:
    """How far ahead of a deadline to arm the timer, given recent wake-ups' lateness (seconds).

    The median, capped at :data:`MAX_LEAD_S`: half the wake-ups come later than it (no spin, and
    late by less than before); the quicker half spins for the difference.
    """
    ordered = sorted(latencies)
    return min(ordered[len(ordered) // 2], MAX_LEAD_S)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> Any:
    """libc with the two timerfd calls typed, or None where there is no timerfd (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_create.restype = ctypes.c_int
        libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
        libc.timerfd_settime.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


class TimerFdClock:
    """``time.monotonic`` time; ``sleep_until`` wakes through a timerfd, never before the deadline.

    Sleepers wait on futures in a heap ordered by deadline; the timerfd is armed at the earliest.
    A cancelled sleeper's entry stays in the heap and is dropped when its deadline passes.
    """

    __slots__ = (
        "__weakref__",
        "_armed",
        "_closer",
        "_fd",
        "_heap",
        "_latencies",
        "_lead",
        "_loop",
        "_seq",
        "_spec",
        "_spin",
        "now",
    )

    def __init__(self, spin: Callable[[], None] | None = None) -> None:
        self.now = time.monotonic
        # Called over and over while a sleeper spins to its deadline (the loop is held meanwhile).
        self._spin = spin or _nothing
        self._fd = -1
        self._closer: weakref.finalize[Any, Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = 0
        # The deadline the timerfd is armed for (inf: disarmed); it fires a lead earlier.
        self._armed = math.inf
        self._lead = 0.0
        self._latencies: list[float] = []
        self._spec = _Itimerspec()

    async def sleep_until(self, deadline: float) -> float:
        now = self.now
        if deadline > now():
            loop = asyncio.get_running_loop()
            if loop is not self._loop:
                self._bind(loop)
            wake: asyncio.Future[None] = loop.create_future()
            heapq.heappush(self._heap, (deadline, self._seq, wake))
            self._seq += 1
            if deadline < self._armed:
                self._arm(deadline)
            lead = self._lead
            await wake
            # How late this task runs after the time the fd fired: the host's wake-up and the loop's
            # turn to this task, both of which the lead is there to cover.
            self._note_wake(now() - (deadline - lead))
            # Woken up to a lead early: the rest of the way on the clock, never before the deadline.
            spin = self._spin
            while now() < deadline:
                spin()
        lag = now() - deadline
        return lag if lag > 0.0 else 0.0

    @property
    def lead(self) -> float:
        """How far ahead of a deadline the timer fires now (seconds; 0 until a window is measured)."""
        return self._lead

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """A timerfd for this loop (a new loop, as in tests, gets a new one)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        if self._closer is not None:
            self._closer()  # closes the old fd, once
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._fd = fd
        self._closer = weakref.finalize(self, _close_quietly, fd)
        self._loop = loop
        self._heap = [entry for entry in self._heap if not entry[2].done()]
        self._armed = math.inf
        loop.add_reader(fd, self._on_ready)

    def _arm(self, deadline: float) -> None:
        # A lead early, rounded up to the nanosecond: never before ``deadline - lead`` (the sleeper
        # spins from there to the deadline itself).
        fires_at = deadline - self._lead
        seconds = math.floor(fires_at)
        nanos = math.ceil((fires_at - seconds) * 1e9)
        if nanos >= 1_000_000_000:
            seconds, nanos = seconds + 1, nanos - 1_000_000_000
        value = self._spec.it_value
        value.tv_sec = seconds
        value.tv_nsec = nanos
        if _LIBC.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) < 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self._armed = deadline

    def _on_ready(self) -> None:
        with suppress(BlockingIOError):  # re-armed since it fired
            os.read(self._fd, 8)
        self._armed = math.inf
        heap = self._heap
        now = self.now()
        # Every sleeper whose early wake-up is due (it spins for the rest in sleep_until).
        due = now + self._lead + _ON_TIME_S
        while heap and heap[0][0] <= due:
            wake = heapq.heappop(heap)[2]
            if not wake.done():  # a cancelled sleeper
                wake.set_result(None)
        if heap:
            self._arm(heap[0][0])

    def _note_wake(self, latency: float) -> None:
        latencies = self._latencies
        latencies.append(latency)
        if len(latencies) == WAKE_WINDOW:
            self._lead = wake_lead(latencies)
            latencies.clear()


def _nothing() -> None:
    pass


def _close_quietly(fd: int) -> None:
    with suppress(OSError):
        os.close(fd)


def precise(clock: Clock, spin: Callable[[], None] | None = None) -> Clock:
    """A :class:`TimerFdClock` (calling ``spin`` while it spins) in place of a real-time
    :class:`MonotonicClock`; any other clock as it is."""
    if _LIBC is not None and isinstance(clock, MonotonicClock) and clock.now is time.monotonic:
        return TimerFdClock(spin)
    return clock
