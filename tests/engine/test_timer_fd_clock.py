"""TimerFdClock in real time: never wakes before a deadline, wakes sleepers in deadline order.

Only orderings and "not before" are asserted (a loaded machine may wake anyone late, never early),
and the armed lead's bounds; how much lag the lead removes is bench_live_timing's to measure.
"""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from llmsim.engine.clock import ManualClock, MonotonicClock
from llmsim.engine.timer_fd_clock import MAX_LEAD_S, WAKE_WINDOW, TimerFdClock, precise, wake_lead

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


def test_the_lead_is_the_median_lateness_and_never_over_its_cap() -> None:
    us = 1e-6
    # 32 wake-ups 1..32 µs late, shuffled: sorted, index 32 // 2 = 16 holds 17 µs; 16 of them
    # (1..16 µs) come quicker than that and spin, the other 16 are late by what exceeds it.
    lateness = [((k * 13) % 32 + 1) * us for k in range(32)]
    assert sorted(lateness) == [(k + 1) * us for k in range(32)]
    assert wake_lead(lateness) == pytest.approx(17 * us)
    assert wake_lead([0.4e-3, 0.1e-3, 0.3e-3, 0.2e-3]) == pytest.approx(0.3e-3)
    # A loop whose own work made every wake-up late by milliseconds: the spin stays bounded.
    assert wake_lead([5e-3] * WAKE_WINDOW) == MAX_LEAD_S


async def test_once_armed_a_lead_early_a_sleep_still_never_ends_before_its_deadline() -> None:
    clock = TimerFdClock()
    assert clock.lead == 0.0
    start = time.monotonic()
    for i in range(1, 3 * WAKE_WINDOW + 1):
        deadline = start + i * 0.0013
        lag = await clock.sleep_until(deadline)
        assert time.monotonic() >= deadline
        assert lag >= 0.0
    # Every wake-up runs after the fd fired, so some lateness was measured and the timer now
    # fires ahead of the deadline (the spin covering the rest), by no more than the cap.
    assert 0.0 < clock.lead <= MAX_LEAD_S


async def test_a_spinning_sleeper_calls_its_spin_and_only_while_it_sleeps() -> None:
    # The spin holds the loop: what it calls (the arrival poll) runs between the wake-up and the
    # deadline, inside the sleep.
    sleeping = False
    calls: list[bool] = []
    clock = TimerFdClock(spin=lambda: calls.append(sleeping))
    start = time.monotonic()
    for i in range(1, 3 * WAKE_WINDOW + 1):
        deadline = start + i * 0.0013
        sleeping = True
        await clock.sleep_until(deadline)
        sleeping = False
        assert time.monotonic() >= deadline
    # Once a lead is armed (the median lateness), about half the wake-ups come before their
    # deadline and spin.
    assert clock.lead > 0.0
    assert calls
    assert all(calls)


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
