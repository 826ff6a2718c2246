"""TimerFdClock in real time: never wakes before a deadline, wakes sleepers in deadline order.

Only orderings and "not before" are asserted (a loaded machine may wake anyone late, never early).
"""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from llmsim.engine.clock import ManualClock, MonotonicClock
from llmsim.engine.timer_fd_clock import TimerFdClock, precise

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


async def test_a_sleep_never_ends_before_its_deadline_and_reports_its_lag() -> None:
    clock = TimerFdClock()
    start = time.monotonic()
    for i in range(1, 21):
        # Sub-millisecond offsets: what a millisecond timer cannot hit.
        deadline = start + i * 0.0013
        lag = await clock.sleep_until(deadline)
        woke = time.monotonic()
        assert woke >= deadline
        assert 0.0 <= lag <= woke - deadline


async def test_sleepers_wake_in_deadline_order_whatever_order_they_slept_in() -> None:
    clock = TimerFdClock()
    base = time.monotonic() + 0.02
    woken: list[int] = []

    async def sleeper(k: int, offset: float) -> None:
        await clock.sleep_until(base + offset)
        assert time.monotonic() >= base + offset
        woken.append(k)

    offsets = {0: 0.004, 1: 0.001, 2: 0.003, 3: 0.0, 4: 0.002}
    await asyncio.gather(*(sleeper(k, off) for k, off in offsets.items()))
    assert woken == [3, 1, 4, 2, 0]


async def test_a_cancelled_sleeper_leaves_the_others_on_time() -> None:
    clock = TimerFdClock()
    base = time.monotonic() + 0.01
    early = asyncio.ensure_future(clock.sleep_until(base))
    late = asyncio.ensure_future(clock.sleep_until(base + 0.005))
    await asyncio.sleep(0)
    early.cancel()
    with pytest.raises(asyncio.CancelledError):
        await early
    await late
    assert time.monotonic() >= base + 0.005


async def test_a_past_deadline_returns_its_lag_without_suspending() -> None:
    clock = TimerFdClock()
    deadline = time.monotonic() - 0.004
    step = clock.sleep_until(deadline)
    with pytest.raises(StopIteration) as done:
        step.send(None)  # finished on its first step: never suspended
    assert done.value.value >= 0.004


def test_the_clock_follows_a_new_event_loop() -> None:
    clock = TimerFdClock()
    for _ in range(2):
        deadline = time.monotonic() + 0.002
        asyncio.run(clock.sleep_until(deadline))
        assert time.monotonic() >= deadline


def test_precise_replaces_only_a_real_time_monotonic_clock() -> None:
    assert isinstance(precise(MonotonicClock()), TimerFdClock)
    virtual = MonotonicClock(now=lambda: 0.0)  # a test's loop-time clock stays as it is
    assert precise(virtual) is virtual
    manual = ManualClock()
    assert precise(manual) is manual
