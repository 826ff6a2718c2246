"""The fixed and instant engines in virtual loop time (looptime): exact deadlines, no drift."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from llmsim.engine.clock import ManualClock, MonotonicClock
from llmsim.engine.errors import RequestAborted
from llmsim.engine.fixed import FixedEngine, FixedTiming
from llmsim.engine.instant import InstantEngine
from llmsim.types import FinishReason, GenerationPlan, Pacing, RequestId, RequestStats, StepStats, TokenEvent
from tests.engine.streams import run


class Recorder:
    def __init__(self) -> None:
        self.finished: list[RequestStats] = []
        self.first: list[float] = []

    def on_step(self, stats: StepStats) -> None:
        raise AssertionError("fixed engine has no steps")

    def on_first_token(self, ttft: float) -> None:
        self.first.append(ttft)

    def on_request_finished(self, stats: RequestStats) -> None:
        self.finished.append(stats)


def plan(n_tokens: int, prompt_tokens: int = 100) -> GenerationPlan:
    return GenerationPlan(prompt_tokens, tuple(f"t{i}" for i in range(n_tokens)), FinishReason.STOP, "e")


def loop_clock() -> MonotonicClock:
    return MonotonicClock(now=asyncio.get_running_loop().time)


@pytest.mark.looptime
async def test_fixed_timeline_is_anchored_at_arrival() -> None:
    # TTFT = 50 ms + 1000 tokens / 10k tok/s = 150 ms; then one token per 20 ms.
    clock = loop_clock()
    rec = Recorder()
    engine = FixedEngine(FixedTiming(0.050, 10_000, 0.020), clock, rec)
    arrival = clock.now()
    events: list[TokenEvent] = []
    async with aclosing(run(engine, plan(5, prompt_tokens=1000), arrival, RequestId("r"))) as it:
        async for ev in it:
            events.append(ev)
            assert clock.now() == pytest.approx(ev.sim_time)
    expected = [arrival + 0.150 + i * 0.020 for i in range(5)]
    assert [e.sim_time for e in events] == pytest.approx(expected)
    assert [e.index for e in events] == [0, 1, 2, 3, 4]
    assert [e.text for e in events] == ["t0", "t1", "t2", "t3", "t4"]
    assert rec.first == [pytest.approx(0.150)]
    (stats,) = rec.finished
    assert stats.finish_reason is FinishReason.STOP
    assert stats.output_tokens == 5
    assert stats.ttft == pytest.approx(0.150)
    assert stats.e2e == pytest.approx(0.150 + 4 * 0.020)


@pytest.mark.looptime
async def test_overhead_before_the_engine_is_absorbed_and_lateness_does_not_accumulate() -> None:
    clock = loop_clock()
    engine = FixedEngine(FixedTiming(0.100, None, 0.010), clock)
    arrival = clock.now()
    await asyncio.sleep(0.030)  # request handling before the engine: shorter than TTFT
    times = []
    async with aclosing(run(engine, plan(4), arrival, RequestId("r"))) as it:
        async for ev in it:
            # Lag as the API measures it: when the token is in hand minus its deadline.
            times.append((clock.now(), clock.now() - ev.sim_time))
            if ev.index == 1:
                await asyncio.sleep(0.025)  # a slow consumer: 2.5 ITLs late once
    # token 0 at 100 ms (overhead absorbed), token 1 at 110 ms; the consumer comes back at 135 ms:
    # token 2 (deadline 120 ms) goes out at once with 15 ms lag, token 3 is back on its 130 ms... which
    # has also passed (135 ms): lag 5 ms. The timeline never shifts.
    assert [t for t, _ in times] == pytest.approx([arrival + 0.100, arrival + 0.110, arrival + 0.135, arrival + 0.135])
    assert [lag for _, lag in times] == pytest.approx([0.0, 0.0, 0.015, 0.005])


@pytest.mark.looptime
async def test_closing_the_iterator_reports_an_abort() -> None:
    clock = loop_clock()
    rec = Recorder()
    engine = FixedEngine(FixedTiming(0.0, None, 0.010), clock, rec)
    async with aclosing(run(engine, plan(10), clock.now(), RequestId("r"))) as it:
        async for ev in it:
            if ev.index == 2:
                break
    (stats,) = rec.finished
    assert stats.finish_reason is FinishReason.ABORT
    assert stats.output_tokens == 3
    assert engine.snapshot().num_running == 0


async def test_instant_engine_releases_everything_due_at_arrival() -> None:
    # Arrival at 4.0, the engine runs at 5.0: zero simulated latency, the second of handling is lag.
    clock = ManualClock(start=5.0)
    rec = Recorder()
    engine = InstantEngine(clock, rec)
    events = [ev async for ev in run(engine, plan(3), 4.0, RequestId("r"))]
    assert [e.sim_time for e in events] == [4.0, 4.0, 4.0]
    assert clock.now() == 5.0  # nothing waited
    (stats,) = rec.finished
    assert stats.finish_reason is FinishReason.STOP
    assert stats.ttft == 0.0
    assert stats.e2e == 0.0


async def test_manual_clock_reports_lag_of_past_deadlines() -> None:
    clock = ManualClock(start=10.0)
    assert await clock.sleep_until(9.5) == 0.5
    assert await clock.sleep_until(12.0) == 0.0
    assert clock.now() == 12.0


def paced_plan(n_tokens: int, pacing: Pacing, prompt_tokens: int = 100) -> GenerationPlan:
    return GenerationPlan(prompt_tokens, tuple(f"t{i}" for i in range(n_tokens)), FinishReason.STOP, "e", pacing=pacing)


@pytest.mark.looptime
async def test_pacing_stretches_and_pauses_the_fixed_timeline_and_the_stats_see_it() -> None:
    # TTFT 100 ms, ITL 20 ms; slowdown 3 and a 500 ms pause before token 2:
    # token 0 at 300 ms, 1 at 360 ms, 2 at 420 + 500 = 920 ms, 3 at 980 ms.
    clock = loop_clock()
    rec = Recorder()
    engine = FixedEngine(FixedTiming(0.100, None, 0.020), clock, rec)
    arrival = clock.now()
    events = []
    async with aclosing(run(engine, paced_plan(4, Pacing(3.0, 2, 0.5)), arrival, RequestId("r"))) as it:
        async for ev in it:
            assert clock.now() == pytest.approx(ev.sim_time)
            events.append(ev)
    expected = [arrival + t for t in (0.300, 0.360, 0.920, 0.980)]
    assert [e.sim_time for e in events] == pytest.approx(expected)
    assert rec.first == [pytest.approx(0.300)]
    (stats,) = rec.finished
    assert stats.token_times == pytest.approx(expected)
    assert stats.finish_reason is FinishReason.STOP


@pytest.mark.looptime
async def test_a_pause_before_the_first_token_delays_ttft() -> None:
    clock = loop_clock()
    rec = Recorder()
    engine = FixedEngine(FixedTiming(0.050, None, 0.010), clock, rec)
    arrival = clock.now()
    events = [ev async for ev in run(engine, paced_plan(2, Pacing(pause_at=0, pause_s=2.0)), arrival, RequestId("r"))]
    assert [e.sim_time - arrival for e in events] == pytest.approx([2.050, 2.060])
    assert rec.first == [pytest.approx(2.050)]


@pytest.mark.looptime
async def test_abort_requests_ends_a_waiting_stream_at_once_with_request_aborted() -> None:
    # TTFT 10 s: the abort at 1 s must not wait for the deadline.
    clock = loop_clock()
    rec = Recorder()
    engine = FixedEngine(FixedTiming(10.0, None, 0.010), clock, rec)
    arrival = clock.now()

    async def consume() -> list[TokenEvent]:
        got: list[TokenEvent] = []
        async with aclosing(run(engine, plan(5), arrival, RequestId("r"))) as it:
            async for ev in it:
                got.append(ev)
        return got

    task = asyncio.create_task(consume())
    await asyncio.sleep(1.0)
    assert engine.abort_requests() == 1
    with pytest.raises(RequestAborted):
        await task
    assert clock.now() == pytest.approx(arrival + 1.0)
    (stats,) = rec.finished
    assert (stats.finish_reason, stats.output_tokens) == (FinishReason.ABORT, 0)
    assert stats.finished == pytest.approx(arrival + 1.0)
    assert engine.snapshot().num_running == 0
    assert engine.abort_requests() == 0


@pytest.mark.looptime
async def test_an_abort_while_the_consumer_is_busy_elsewhere_ends_its_next_pull() -> None:
    clock = loop_clock()
    engine = FixedEngine(FixedTiming(0.0, None, 0.010), clock)
    got = []

    async def consume() -> None:
        async with aclosing(run(engine, plan(5), clock.now(), RequestId("r"))) as it:
            async for ev in it:
                got.append(ev.index)
                if ev.index == 1:
                    engine.abort_requests()  # not waiting in the engine: nothing to cancel
                    await asyncio.sleep(0.001)  # and no cancellation lands here

    with pytest.raises(RequestAborted):
        await consume()
    assert got == [0, 1]


@pytest.mark.looptime
async def test_a_cancellation_that_is_not_an_abort_goes_through() -> None:
    clock = loop_clock()
    engine = FixedEngine(FixedTiming(1.0, None, 0.010), clock)

    async def consume() -> None:
        async with aclosing(run(engine, plan(3), clock.now(), RequestId("r"))) as it:
            async for _ in it:
                pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.snapshot().num_running == 0
