"""MonotonicClock in virtual loop time: deadlines are absolute, and a token never leaves early."""

from __future__ import annotations

import asyncio
import math

import pytest

from llmsim.engine.clock import MonotonicClock


@pytest.mark.looptime
async def test_a_coarse_timer_that_fires_early_is_waited_out() -> None:
    loop = asyncio.get_running_loop()

    # The clock reads whole milliseconds while timers fire at the exact delay: seen through this
    # clock, a timer fires up to 1 ms early (as uvloop's, which count a cached millisecond time).
    def coarse_now() -> float:
        return math.floor(round(loop.time() * 1e6) / 1e3) / 1e3

    clock = MonotonicClock(now=coarse_now)
    start = loop.time()
    lag = await clock.sleep_until(0.0155)
    # First wait: 15.5 ms -> the clock reads 15 ms, 0.5 ms early; wait again, at least 1 ms
    # (no spinning through sub-millisecond timers): loop time 16.5 ms, the clock reads 16 ms.
    assert loop.time() - start == pytest.approx(0.0165)
    assert clock.now() >= 0.0155
    assert lag == pytest.approx(0.0005)


@pytest.mark.looptime
async def test_past_deadline_returns_its_lag_without_waiting() -> None:
    loop = asyncio.get_running_loop()
    clock = MonotonicClock(now=loop.time)
    await asyncio.sleep(0.010)
    before = loop.time()
    assert await clock.sleep_until(before - 0.004) == pytest.approx(0.004)
    assert loop.time() == before


@pytest.mark.looptime
async def test_lateness_never_accumulates_over_a_timeline() -> None:
    loop = asyncio.get_running_loop()
    clock = MonotonicClock(now=loop.time)
    anchor = loop.time()
    for i in range(1, 101):
        await clock.sleep_until(anchor + i * 0.015)
    # 100 deadlines of an anchored 15 ms timeline end at exactly 1.5 s, not 1.5 s plus drift.
    assert loop.time() - anchor == pytest.approx(1.5)
