"""Time for engines: absolute deadlines, never accumulated sleeps.

Every token targets ``deadline = arrival + offset``; ``sleep_until`` returns how late the wake-up
was (the lag). Because the next deadline is computed from the timeline, not from "now", lateness
never accumulates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    """The only way an engine sees time."""

    def now(self) -> float:
        """Seconds on a monotonic timeline shared with request arrival stamps."""
        ...

    async def sleep_until(self, deadline: float) -> float:
        """Wait until ``deadline``; return the lag ``max(0, wake-up - deadline)``."""
        ...


_MIN_REWAIT_S = 0.001
# Earlier than this is float rounding of the timeline, not an early wake-up.
_ON_TIME_S = 1e-6


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():  # cancelled meanwhile
        future.set_result(None)


class MonotonicClock:
    """Real time for the server.

    NOTE: ``time.monotonic`` rather than ``loop.time()``: uvloop's loop time is libuv's
    millisecond-resolution cached ``uv_now``, too coarse to measure lag.
    ``now`` is injectable so tests can run this same code in virtual loop time (looptime).
    """

    __slots__ = ("now",)

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self.now = now

    async def sleep_until(self, deadline: float) -> float:
        now = self.now
        delay = deadline - now()
        if delay > 0:
            # asyncio.sleep without its own coroutine frame: this runs once per streamed token.
            loop = asyncio.get_running_loop()
            while True:
                wake: asyncio.Future[None] = loop.create_future()
                timer = loop.call_later(delay, _wake, wake)
                try:
                    await wake
                except BaseException:
                    timer.cancel()
                    raise
                delay = deadline - now()
                if delay <= _ON_TIME_S:
                    break
                # NOTE: uvloop's timers count whole milliseconds of a loop time cached at the start
                # of the iteration, so they fire up to ~1.3 ms early. A token must never leave before
                # its deadline (lag is the only error, and it is measured): wait again, at least 1 ms
                # so that the loop sleeps instead of spinning through sub-millisecond timers.
                delay = max(delay, _MIN_REWAIT_S)
        lag = now() - deadline
        return lag if lag > 0.0 else 0.0


class ManualClock:
    """A clock that only moves when a test says so; ``sleep_until`` never suspends.

    For pure code that asks for the time but must not wait (e.g. a virtual-time run): the
    sleeper jumps the clock forward to the deadline.
    """

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    async def sleep_until(self, deadline: float) -> float:
        if deadline > self._now:
            self._now = deadline
            return 0.0
        return self._now - deadline
