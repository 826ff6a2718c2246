"""The scheduler engine on an event loop in virtual loop time (looptime: 1 us resolution, no real waits)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest

from llmsim.engine.clock import MonotonicClock
from llmsim.engine.errors import EngineOverloaded, EngineStopped, RequestAborted
from llmsim.engine.scheduler import SchedulerEngine, SchedulerParams
from llmsim.fleet import FleetRequest, simulate
from llmsim.types import FinishReason, GenerationPlan, Pacing, RequestId, RequestStats, StepStats, TokenEvent
from tests.engine.streams import run

from .builders import roofline, seed_params, tiny_params

TICK = 2e-6  # looptime rounds timers to 1 us


class Recorder:
    def __init__(self) -> None:
        self.steps: list[StepStats] = []
        self.first: list[float] = []
        self.finished: list[RequestStats] = []

    def on_step(self, stats: StepStats) -> None:
        self.steps.append(stats)

    def on_first_token(self, ttft: float) -> None:
        self.first.append(ttft)

    def on_request_finished(self, stats: RequestStats) -> None:
        self.finished.append(stats)


def plan(n_tokens: int, prompt_tokens: int = 16, prompt_token_ids: tuple[int, ...] | None = None) -> GenerationPlan:
    return GenerationPlan(
        prompt_tokens,
        tuple(f"t{i}" for i in range(n_tokens)),
        FinishReason.STOP,
        "e",
        prompt_token_ids=prompt_token_ids,
    )


def loop_clock() -> MonotonicClock:
    return MonotonicClock(now=asyncio.get_running_loop().time)


async def started(params: SchedulerParams, rec: Recorder) -> tuple[SchedulerEngine, MonotonicClock]:
    clock = loop_clock()
    engine = SchedulerEngine(params, clock, rec)
    await engine.start()
    return engine, clock


@pytest.mark.looptime
async def test_tokens_are_released_at_exactly_the_step_deadlines() -> None:
    rec = Recorder()
    engine, clock = await started(seed_params(), rec)
    arrival = clock.now()
    durations = [roofline(16, 16)] + [roofline(1, 16 + j) for j in range(1, 5)]
    deadlines = [arrival + sum(durations[: i + 1]) for i in range(5)]
    events: list[TokenEvent] = []
    async with aclosing(run(engine, plan(5), arrival, RequestId("r"))) as it:
        async for ev in it:
            events.append(ev)
            assert clock.now() == pytest.approx(ev.sim_time, abs=TICK)
    assert [e.sim_time for e in events] == pytest.approx(deadlines, rel=1e-12)
    assert [(e.index, e.text) for e in events] == [(i, f"t{i}") for i in range(5)]
    # Anchored timeline: each step starts where the previous one was due to end.
    assert [s.start for s in rec.steps] == pytest.approx([arrival, *deadlines[:-1]], rel=1e-12)
    assert rec.first == [pytest.approx(durations[0], rel=1e-12)]
    (stats,) = rec.finished
    assert stats.finish_reason is FinishReason.STOP
    assert stats.output_tokens == 5
    assert stats.token_times == pytest.approx(deadlines, rel=1e-12)
    assert engine.snapshot().kv_used_blocks == 0
    # 7,609 blocks; block 0 is vLLM's null block, so usage is over the 7,608 requests can use.
    assert engine.snapshot().kv_total_blocks == 7609 - 1
    await engine.stop()


SHARED = tuple(range(1000, 1700))


@pytest.mark.looptime
@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("request_overhead", [0.0, 0.0047])
async def test_concurrent_clients_see_the_virtual_time_timeline(
    async_scheduling: bool, request_overhead: float
) -> None:
    # The driver and simulate() share the core: for the same arrivals, the same token times,
    # prefix-cache hits and admission rules (sync or async scheduling, a request overhead) included.
    # Arrivals are whole milliseconds, away from the (irrational) step boundaries.
    workload = [
        FleetRequest.of(0.000, 300, 20, prompt_token_ids=SHARED[:300]),
        FleetRequest.of(0.003, 50, 30),
        FleetRequest.of(0.011, 9000, 5),
        FleetRequest.of(0.200, 10, 10),
        FleetRequest.of(1.500, 700, 3, prompt_token_ids=SHARED),
        FleetRequest.of(1.520, 700, 3, prompt_token_ids=SHARED),
    ]
    rec = Recorder()
    params = seed_params(async_scheduling=async_scheduling, request_overhead_s=request_overhead)
    engine, clock = await started(params, rec)

    async def client(i: int, item: FleetRequest) -> list[float]:
        await asyncio.sleep(item.arrival)
        stamp = clock.now()
        assert stamp == item.arrival
        plan_i = plan(item.output_tokens, item.prompt_tokens, item.prompt_token_ids)
        return [ev.sim_time async for ev in run(engine, plan_i, stamp, RequestId(str(i)))]

    got = await asyncio.gather(*(client(i, w) for i, w in enumerate(workload)))
    expected = simulate(params, workload)
    assert [r.prefix_hit_tokens for r in expected.requests] == [0, 0, 0, 0, 288, 688]
    for times, r in zip(got, expected.requests, strict=True):
        assert times == pytest.approx(r.token_times, rel=1e-12)
    assert [s.start for s in rec.steps] == pytest.approx([s.start for s in expected.steps], rel=1e-12)
    assert [(s.prefix_cache_queries, s.prefix_cache_hits) for s in rec.steps] == [
        (s.prefix_cache_queries, s.prefix_cache_hits) for s in expected.steps
    ]
    assert sorted(r.num_cached_tokens for r in rec.finished) == [0, 0, 0, 0, 288, 688]
    await engine.stop()


@pytest.mark.looptime
@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_a_pipeline_serves_the_virtual_time_timeline(async_scheduling: bool) -> None:
    # Pipeline parallelism: the live loop and simulate() run the same batch queue (batches in
    # flight, decided as the oldest returns), so the same token times and batch starts.
    workload = [
        FleetRequest.of(0.000, 300, 20, prompt_token_ids=SHARED[:300]),
        FleetRequest.of(0.003, 50, 30),
        FleetRequest.of(0.011, 9000, 5),
        FleetRequest.of(0.200, 10, 10),
        FleetRequest.of(1.500, 700, 3, prompt_token_ids=SHARED),
    ]
    base = seed_params(async_scheduling=async_scheduling)
    params = dataclasses.replace(
        base,
        gpu=dataclasses.replace(base.gpu, interconnect_bandwidth=450e9, interconnect_latency_s=40e-6),
        model=dataclasses.replace(base.model, num_hidden_layers=32, hidden_size=4096),
        pipeline_parallel_size=2,
    )
    rec = Recorder()
    engine, clock = await started(params, rec)

    async def client(i: int, item: FleetRequest) -> list[float]:
        await asyncio.sleep(item.arrival)
        stamp = clock.now()
        plan_i = plan(item.output_tokens, item.prompt_tokens, item.prompt_token_ids)
        return [ev.sim_time async for ev in run(engine, plan_i, stamp, RequestId(str(i)))]

    got = await asyncio.gather(*(client(i, w) for i, w in enumerate(workload)))
    expected = simulate(params, workload)
    for times, r in zip(got, expected.requests, strict=True):
        assert times == pytest.approx(r.token_times, rel=1e-12)
    assert [s.start for s in rec.steps] == pytest.approx([s.start for s in expected.steps], rel=1e-12)
    assert expected.requests[4].prefix_hit_tokens == 288  # the 18 full blocks of request 0's 300
    await engine.stop()


@pytest.mark.looptime
async def test_closing_an_iterator_aborts_the_request_and_frees_its_blocks() -> None:
    rec = Recorder()
    engine, clock = await started(seed_params(), rec)
    async with aclosing(run(engine, plan(50, prompt_tokens=1000), clock.now(), RequestId("gone"))) as it:
        got = [ev async for ev in take(it, 3)]
    assert len(got) == 3
    snap = engine.snapshot()
    assert (snap.num_running, snap.num_waiting, snap.kv_used_blocks) == (0, 0, 0)
    (stats,) = rec.finished
    assert stats.finish_reason is FinishReason.ABORT
    assert stats.output_tokens == 3
    assert stats.finished == pytest.approx(got[-1].sim_time, abs=TICK)
    # The loop carries on for the next request.
    events = [ev async for ev in run(engine, plan(2), clock.now(), RequestId("next"))]
    assert len(events) == 2
    await engine.stop()


async def take(it: AsyncIterator[TokenEvent], n: int) -> AsyncIterator[TokenEvent]:
    """The first ``n`` items of an async iterator, leaving it open."""
    for _ in range(n):
        yield await anext(it)


@pytest.mark.looptime
async def test_an_idle_engine_restarts_at_the_arrival_stamp_not_at_now() -> None:
    rec = Recorder()
    engine, clock = await started(seed_params(), rec)
    first = [ev async for ev in run(engine, plan(2), clock.now(), RequestId("a"))]
    assert first[-1].sim_time < 0.01
    await asyncio.sleep(5.0 - clock.now())
    # Stamped 100 ms before the engine sees it (e.g. by middleware): the timeline starts there.
    arrival = clock.now() - 0.1
    events: list[TokenEvent] = []
    received: list[float] = []
    async for ev in run(engine, plan(3), arrival, RequestId("b")):
        events.append(ev)
        received.append(clock.now())
    durations = [roofline(16, 16), roofline(1, 17), roofline(1, 18)]
    assert [e.sim_time for e in events] == pytest.approx(
        [arrival + sum(durations[: i + 1]) for i in range(3)], rel=1e-12
    )
    # That first deadline had already passed when the request reached the engine: released at
    # once, late by 5.0 - deadline (the lag the API reports), not shifted.
    assert received[0] - events[0].sim_time == pytest.approx(5.0 - (arrival + durations[0]), abs=TICK)
    assert rec.steps[2].start == arrival
    await engine.stop()


@pytest.mark.looptime
async def test_a_full_waiting_queue_refuses_new_requests() -> None:
    rec = Recorder()
    engine, clock = await started(seed_params(max_num_sequences=1, max_waiting_requests=1), rec)
    a = run(engine, plan(100), clock.now(), RequestId("a"))
    await anext(a)  # a runs
    b_task = asyncio.create_task(collect(run(engine, plan(2), clock.now(), RequestId("b"))))
    # b is judged when the timeline reaches its arrival (the next step boundary) and waits.
    await asyncio.sleep(0.05)
    snap = engine.snapshot()
    assert (snap.num_running, snap.num_waiting) == (1, 1)
    with pytest.raises(EngineOverloaded, match="1 requests waiting"):
        await engine.submit([plan(1)], clock.now(), [RequestId("c")])
    assert engine.snapshot().num_waiting == 1  # c left nothing behind
    await a.aclose()
    assert len(await b_task) == 2
    (d,) = await engine.submit([plan(1)], clock.now(), [RequestId("d")])
    assert len(await collect(d)) == 1
    # Refused requests never ran, so they are not reported: a (aborted), b, d.
    assert sorted(s.request_id for s in rec.finished) == ["a", "b", "d"]
    await engine.stop()


@pytest.mark.looptime
async def test_the_choices_of_one_request_are_admitted_or_refused_together() -> None:
    engine, clock = await started(seed_params(max_num_sequences=1, max_waiting_requests=3), Recorder())
    a = run(engine, plan(100), clock.now(), RequestId("a"))
    await anext(a)  # a runs; the waiting queue is empty and takes 3
    # 4 choices cannot all wait: none is queued (not 3 of them).
    with pytest.raises(EngineOverloaded):
        await engine.submit([plan(2)] * 4, clock.now(), [RequestId(f"n4-{i}") for i in range(4)])
    assert engine.snapshot().num_waiting == 0
    streams = await engine.submit([plan(2)] * 3, clock.now(), [RequestId(f"n3-{i}") for i in range(3)])
    assert engine.snapshot().num_waiting == 3
    await a.aclose()
    assert [len(await collect(s)) for s in streams] == [2, 2, 2]
    await engine.stop()


class BehindClock:
    """A host too slow for the timeline: every step ends ``behind`` seconds after its deadline.

    ``now`` is the loop's (virtual) time; each ``sleep_until`` waits until the deadline plus
    ``behind``, as a saturated event loop would wake the step loop late.
    """

    def __init__(self, behind: float) -> None:
        self.behind = behind

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep_until(self, deadline: float) -> float:
        late = deadline + self.behind
        await asyncio.sleep(max(0.0, late - self.now()))
        return max(0.0, self.now() - deadline)


@pytest.mark.looptime
@pytest.mark.parametrize("behind", [0.0, 0.5])
async def test_admission_follows_the_simulated_timeline_not_the_host(behind: float) -> None:
    """20 long prompts arrive 2 ms apart against a queue limit of 4: who is refused is decided by
    the simulated queue at each arrival, so a host running 0.5 s behind refuses exactly the same
    requests as an on-time one, and exactly those the virtual-time core refuses."""
    params = seed_params(max_num_sequences=2, max_waiting_requests=4)
    arrivals = [0.002 * i for i in range(20)]
    expected = simulate(params, [FleetRequest.of(t, 2000, 3) for t in arrivals])
    refused_expected = [r.index for r in expected.requests if r.rejected]
    assert 0 < len(refused_expected) < 20  # the limit bites, but not on everyone

    engine = SchedulerEngine(params, BehindClock(behind), Recorder())
    await engine.start()
    t0 = asyncio.get_running_loop().time()

    async def one(i: int) -> bool:
        await asyncio.sleep(t0 + arrivals[i] - asyncio.get_running_loop().time())
        try:
            (stream,) = await engine.submit([plan(3, prompt_tokens=2000)], t0 + arrivals[i], [RequestId(str(i))])
        except EngineOverloaded:
            return False
        await collect(stream)
        return True

    served = await asyncio.gather(*(one(i) for i in range(20)))
    assert [i for i, ok in enumerate(served) if not ok] == refused_expected
    await engine.stop()


async def collect(it: AsyncIterator[TokenEvent]) -> list[TokenEvent]:
    return [ev async for ev in it]


@pytest.mark.looptime
async def test_stop_ends_in_flight_iterators_and_reports_them_aborted() -> None:
    rec = Recorder()
    engine, clock = await started(seed_params(), rec)
    events: list[TokenEvent] = []

    async def consume() -> None:
        async with aclosing(run(engine, plan(100), clock.now(), RequestId("a"))) as it:
            async for ev in it:
                events.append(ev)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    await engine.stop()
    # The consumer learns it was cut short (the API then ends the response with finish reason "abort").
    with pytest.raises(RequestAborted):
        await task
    assert 0 < len(events) < 100
    assert [s.finish_reason for s in rec.finished] == [FinishReason.ABORT]
    with pytest.raises(EngineStopped):
        await engine.submit([plan(1)], clock.now(), [RequestId("late")])


class Exploding(Recorder):
    def on_step(self, stats: StepStats) -> None:
        raise RuntimeError("observer bug")


@pytest.mark.looptime
async def test_a_failed_step_loop_fails_its_streams_instead_of_hanging() -> None:
    engine, clock = await started(seed_params(), Exploding())
    with pytest.raises(EngineStopped, match="step loop failed"):
        await collect(run(engine, plan(3), clock.now(), RequestId("a")))
    with pytest.raises(EngineStopped):
        await engine.submit([plan(1)], clock.now(), [RequestId("b")])
    await engine.stop()


@pytest.mark.looptime
async def test_a_plan_without_tokens_ends_after_its_prefill() -> None:
    rec = Recorder()
    engine, clock = await started(seed_params(), rec)
    assert await collect(run(engine, plan(0), clock.now(), RequestId("a"))) == []
    (stats,) = rec.finished
    assert stats.finish_reason is FinishReason.STOP
    assert stats.finished == pytest.approx(roofline(16, 16))
    await engine.stop()


class LateClock:
    """A host running a second behind: every deadline is already past when reached, and sleep_until never suspends."""

    def now(self) -> float:
        return asyncio.get_running_loop().time() + 1.0

    async def sleep_until(self, deadline: float) -> float:
        return max(0.0, self.now() - deadline)


async def test_a_loop_running_late_still_lets_consumers_and_arrivals_in() -> None:
    rec = Recorder()
    engine = SchedulerEngine(seed_params(), LateClock(), rec)
    await engine.start()
    seen_at_step: list[int] = []
    async for _ in run(engine, plan(5), 0.0, RequestId("a")):
        seen_at_step.append(len(rec.steps))
    # Each token reaches its consumer before the following step has run.
    assert seen_at_step == [1, 2, 3, 4, 5]
    # Steps of a few ms from an arrival at 0, on a clock at least a second past it: every one is late.
    assert all(s.lag > 0.9 for s in rec.steps)
    await engine.stop()


@pytest.mark.looptime
async def test_abort_requests_ends_running_and_queued_streams_and_the_engine_goes_on() -> None:
    rec = Recorder()
    engine, clock = await started(seed_params(), rec)
    arrival = clock.now()
    ends: dict[str, tuple[str, int]] = {}

    async def consume(rid: str, at: float) -> None:
        n = 0
        try:
            async with aclosing(run(engine, plan(1000), at, RequestId(rid))) as it:
                async for _ in it:
                    n += 1
        except RequestAborted:
            ends[rid] = ("aborted", n)

    running = asyncio.create_task(consume("running", arrival))
    # Arrives later on the timeline: still in the inbox when the abort comes.
    queued = asyncio.create_task(consume("queued", arrival + 10.0))
    await asyncio.sleep(0.05)
    assert engine.abort_requests() == 2
    await asyncio.gather(running, queued)
    assert ends["queued"] == ("aborted", 0)
    status, n = ends["running"]
    assert status == "aborted"
    assert 0 < n < 1000
    assert sorted((s.request_id, s.finish_reason) for s in rec.finished) == [
        ("queued", FinishReason.ABORT),
        ("running", FinishReason.ABORT),
    ]
    # 7,609 blocks of which block 0 is vLLM's null block: 7,608 usable, none held.
    assert engine.snapshot() == type(engine.snapshot())(0, 0, 0, 7608)
    # Still serving: a new request runs to its end.
    assert len(await collect(run(engine, plan(3), clock.now(), RequestId("after")))) == 3
    await engine.stop()


def paced(n_tokens: int, pacing: Pacing) -> GenerationPlan:
    return GenerationPlan(16, tuple(f"t{i}" for i in range(n_tokens)), FinishReason.STOP, "e", pacing=pacing)


@pytest.mark.looptime
async def test_a_paced_stream_leaves_at_its_paced_deadlines_and_the_gpu_timeline_is_unchanged() -> None:
    rec = Recorder()
    engine, clock = await started(seed_params(), rec)
    arrival = clock.now()
    durations = [roofline(16, 16)] + [roofline(1, 16 + j) for j in range(1, 4)]
    gpu = [arrival + sum(durations[: i + 1]) for i in range(4)]
    # Slowdown 2, 300 ms pause from token 1: arrival + 2 * (t - arrival), + 0.3 s for tokens 1..3.
    expected = [arrival + 2 * (t - arrival) + (0.3 if i >= 1 else 0.0) for i, t in enumerate(gpu)]
    events: list[TokenEvent] = []
    async with aclosing(run(engine, paced(4, Pacing(2.0, 1, 0.3)), arrival, RequestId("r"))) as it:
        async for ev in it:
            assert clock.now() == pytest.approx(ev.sim_time, abs=TICK)
            events.append(ev)
    assert [e.sim_time for e in events] == pytest.approx(expected, rel=1e-9)
    (stats,) = rec.finished
    # The GPU computed and freed the sequence on its own timeline.
    assert stats.token_times == pytest.approx(gpu, rel=1e-12)
    assert stats.finish_reason is FinishReason.STOP
    await engine.stop()


@pytest.mark.looptime
async def test_a_paced_stream_held_in_its_pause_is_aborted_at_once() -> None:
    rec = Recorder()
    engine, clock = await started(seed_params(), rec)
    arrival = clock.now()
    got: list[int] = []

    async def consume() -> None:
        async with aclosing(run(engine, paced(3, Pacing(pause_at=0, pause_s=60.0)), arrival, RequestId("r"))) as it:
            async for ev in it:
                got.append(ev.index)

    task = asyncio.create_task(consume())
    await asyncio.sleep(1.0)  # the GPU is long done; the stream holds token 0 for 60 s
    engine.abort_requests()
    with pytest.raises(RequestAborted):
        await task
    assert clock.now() == pytest.approx(arrival + 1.0, abs=TICK)
    assert got == []
    await engine.stop()


@pytest.mark.looptime
async def test_stop_interrupts_a_paced_stream_too() -> None:
    engine, clock = await started(seed_params(), Recorder())
    task = asyncio.create_task(
        collect(run(engine, paced(3, Pacing(pause_at=1, pause_s=60.0)), clock.now(), RequestId("r")))
    )
    await asyncio.sleep(1.0)
    await engine.stop()
    with pytest.raises(RequestAborted):
        await task


@pytest.mark.looptime
async def test_an_attached_sink_takes_each_token_at_its_release_and_refusals_are_queued() -> None:
    engine, clock = await started(seed_params(), Recorder())
    arrival = clock.now()
    (taken,) = await engine.submit([plan(5)], arrival, [RequestId("push")])
    (refused,) = await engine.submit([plan(5)], arrival, [RequestId("pull")])
    pushed: list[tuple[float, TokenEvent]] = []

    def sink(event: TokenEvent) -> bool:
        pushed.append((clock.now(), event))
        return True

    assert taken.attach(sink)
    assert refused.attach(lambda event: False)
    # Everything went to the sink: the consumer's iteration only sees the end of the stream.
    assert await collect(taken) == []
    assert [e.index for _, e in pushed] == [0, 1, 2, 3, 4]
    # Handed over at the step deadline itself (virtual time: the release instant).
    assert all(t == pytest.approx(e.sim_time, abs=TICK) for t, e in pushed)
    # A sink that refuses loses nothing: the tokens are pulled instead, in order.
    assert [e.index for e in await collect(refused)] == [0, 1, 2, 3, 4]
    await taken.aclose()
    await refused.aclose()
    await engine.stop()


@pytest.mark.looptime
async def test_a_first_token_is_handed_over_before_the_decode_tokens_of_its_step() -> None:
    engine, clock = await started(seed_params(), Recorder())
    handed: list[tuple[float, str, int]] = []
    decoding = asyncio.Event()

    def sink_of(name: str) -> Any:
        def sink(event: TokenEvent) -> bool:
            handed.append((event.sim_time, name, event.index))
            if len(handed) >= 4:
                decoding.set()
            return True

        return sink

    arrival = clock.now()
    early = await engine.submit([plan(400), plan(400)], arrival, [RequestId("a"), RequestId("b")])
    for name, stream in zip("ab", early, strict=True):
        assert stream.attach(sink_of(name))
    await decoding.wait()  # a and b have their first two tokens each
    (late,) = await engine.submit([plan(3)], clock.now(), [RequestId("c")])
    assert late.attach(sink_of("c"))
    for stream in (*early, late):
        await collect(stream)
    (step_of_c,) = [t for t, name, index in handed if name == "c" and index == 0]
    in_that_step = [(name, index) for t, name, index in handed if t == step_of_c]
    # c's first token, then the decode tokens a and b got in the same step.
    assert in_that_step[0] == ("c", 0)
    assert sorted(name for name, _ in in_that_step[1:]) == ["a", "b"]
    assert all(index > 0 for _, index in in_that_step[1:])
    for stream in (*early, late):
        await stream.aclose()
    await engine.stop()


class Handover:
    """A consumer's prepare and sink, recording (loop time, event) for each call."""

    def __init__(self, clock: MonotonicClock) -> None:
        self.clock = clock
        self.prepared: list[tuple[float, TokenEvent]] = []
        self.pushed: list[tuple[float, TokenEvent]] = []
        self.seen = asyncio.Event()

    def prepare(self, event: TokenEvent) -> None:
        self.prepared.append((self.clock.now(), event))
        self.seen.set()

    def sink(self, event: TokenEvent) -> bool:
        self.pushed.append((self.clock.now(), event))
        return True


@pytest.mark.looptime
async def test_each_token_is_prepared_during_its_step_and_the_same_event_is_pushed_at_the_deadline() -> None:
    engine, clock = await started(seed_params(), Recorder())
    (stream,) = await engine.submit([plan(5)], clock.now(), [RequestId("r")])
    handover = Handover(clock)
    assert stream.attach(handover.sink, handover.prepare)
    assert await collect(stream) == []
    assert [e.index for _, e in handover.pushed] == [0, 1, 2, 3, 4]
    for (prepared_at, prepared), (pushed_at, pushed) in zip(handover.prepared, handover.pushed, strict=True):
        assert pushed is prepared  # the very event, so what was made from it applies
        # Shown while the step ran (at least one decode step before its end), pushed at the deadline.
        assert pushed.sim_time - prepared_at >= roofline(1, 16) - TICK
        assert pushed_at == pytest.approx(pushed.sim_time, abs=TICK)
    await stream.aclose()
    await engine.stop()


@pytest.mark.looptime
async def test_a_stream_closed_between_its_prepare_and_the_deadline_gets_nothing() -> None:
    rec = Recorder()
    engine, clock = await started(seed_params(), rec)
    arrival = clock.now()
    leaving, staying = await engine.submit([plan(8), plan(8)], arrival, [RequestId("a"), RequestId("b")])
    left, stayed = Handover(clock), Handover(clock)
    assert leaving.attach(left.sink, left.prepare)
    assert staying.attach(stayed.sink, stayed.prepare)
    # Wait until token 2 of "a" is prepared (its step is running), then the client leaves.
    while not any(e.index == 2 for _, e in left.prepared):
        left.seen.clear()
        await left.seen.wait()
    deadline = left.prepared[-1][1].sim_time
    assert clock.now() < deadline
    await leaving.aclose()
    # Its prepared token never goes out; the other stream's token of the same step does, on time.
    assert await collect(staying) == []
    assert [e.index for _, e in left.pushed] == [0, 1]
    assert [e.index for _, e in stayed.pushed] == list(range(8))
    assert stayed.pushed[2][1].sim_time == pytest.approx(deadline, abs=TICK)
    (aborted,) = [s for s in rec.finished if s.request_id == "a"]
    assert aborted.finish_reason is FinishReason.ABORT
    assert aborted.output_tokens == 2
    await staying.aclose()
    await engine.stop()


@pytest.mark.looptime
async def test_prepared_pushes_keep_the_pulled_timeline_through_chunked_prefills_and_preemptions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every token the update releases was foreseen and prepared, and pushed once, in order, at the
    same simulated time as when the same workload is pulled (no sink): the pass at the deadline
    and the scheduler's update agree on which sequence releases a token in every kind of step."""
    # 40 blocks of 4 tokens for 6 requests of 12 + 24 tokens (9 blocks each at the end): they
    # outgrow the cache together and are preempted; a 16-token batch budget chunks the prefills.
    params = tiny_params(40, max_batch_tokens=16)
    plans = [plan(24, prompt_tokens=12) for _ in range(6)]
    ids = [RequestId(f"r{i}") for i in range(6)]

    async def timeline(push: bool) -> tuple[list[list[tuple[int, float]]], int, list[float]]:
        rec = Recorder()
        engine, clock = await started(params, rec)
        start = clock.now()
        streams = await engine.submit(plans, start, ids)
        handovers = [Handover(clock) for _ in streams]
        if push:
            for stream, handover in zip(streams, handovers, strict=True):
                assert stream.attach(handover.sink, handover.prepare)
        pulled = await asyncio.gather(*(collect(s) for s in streams))
        for stream in streams:
            await stream.aclose()
        await engine.stop()
        preemptions = sum(s.num_preemptions for s in rec.steps)
        ttfts = sorted(rec.first)
        if not push:
            return [[(e.index, e.sim_time - start) for e in p] for p in pulled], preemptions, ttfts
        assert all(p == [] for p in pulled)
        for handover in handovers:
            prepared_ids = {id(e) for _, e in handover.prepared}
            assert all(id(e) in prepared_ids for _, e in handover.pushed)
            assert all(t == pytest.approx(e.sim_time, abs=TICK) for t, e in handover.pushed)
        return [[(e.index, e.sim_time - start) for _, e in h.pushed] for h in handovers], preemptions, ttfts

    pushed, preempted, pushed_ttfts = await timeline(push=True)
    pulled, _, pulled_ttfts = await timeline(push=False)
    # One first-token observation per request, the same TTFTs either way.
    assert len(pushed_ttfts) == len(plans)
    assert pushed_ttfts == pytest.approx(pulled_ttfts, abs=1e-9)
    assert preempted > 0
    assert all([i for i, _ in tokens] == list(range(24)) for tokens in pushed)
    assert [[i for i, _ in tokens] for tokens in pushed] == [[i for i, _ in tokens] for tokens in pulled]
    for pushed_tokens, pulled_tokens in zip(pushed, pulled, strict=True):
        assert [t for _, t in pushed_tokens] == pytest.approx([t for _, t in pulled_tokens], abs=1e-9)
    assert "had not prepared" not in caplog.text


@pytest.mark.looptime
async def test_streams_aborted_by_the_engine_between_prepare_and_deadline_get_nothing() -> None:
    rec = Recorder()
    engine, clock = await started(seed_params(), rec)
    streams = await engine.submit([plan(8), plan(8)], clock.now(), [RequestId("a"), RequestId("b")])
    handovers = [Handover(clock), Handover(clock)]
    for stream, handover in zip(streams, handovers, strict=True):
        assert stream.attach(handover.sink, handover.prepare)
    first = handovers[0]
    while not any(e.index == 2 for _, e in first.prepared):
        first.seen.clear()
        await first.seen.wait()
    assert clock.now() < first.prepared[-1][1].sim_time
    # vLLM's abort (shutdown, sleep): the sinks stay attached, the streams end under them.
    assert engine.abort_requests() == 2
    for stream in streams:
        with pytest.raises(RequestAborted):
            await collect(stream)
    await asyncio.sleep(0.5)  # well past the step's deadline
    assert [[e.index for _, e in h.pushed] for h in handovers] == [[0, 1], [0, 1]]
    assert sorted(s.output_tokens for s in rec.finished) == [2, 2]
    for stream in streams:
        await stream.aclose()
    await engine.stop()


@pytest.mark.looptime
async def test_arrivals_are_polled_every_few_tokens_of_a_pass_and_after_it() -> None:
    """While the pass holds the event loop, the request side's poll runs at most
    ARRIVAL_POLL_TOKENS writes apart, and once after the last write of the step."""
    from llmsim.engine.scheduler.driver import ARRIVAL_POLL_TOKENS

    written: list[tuple[float, int]] = []  # (deadline, index) per write
    polls: list[int] = []  # writes done when each poll ran

    clock = loop_clock()
    engine = SchedulerEngine(seed_params(), clock, Recorder(), poll_arrivals=lambda: polls.append(len(written)))
    await engine.start()
    arrival = clock.now()
    n = 11  # three polls' worth and a remainder
    streams = await engine.submit([plan(3) for _ in range(n)], arrival, [RequestId(f"r{i}") for i in range(n)])

    def sink(event: TokenEvent) -> bool:
        written.append((event.sim_time, event.index))
        return True

    for stream in streams:
        assert stream.attach(sink)
    for stream in streams:
        await collect(stream)
    assert len(written) == 3 * n
    # Each step releases one token to every stream at one deadline: a pass of 11 writes, polled
    # before writes 0, 4 and 8 and after the last (and once more before each step's planning,
    # with nothing written in between). Writes 0-10 are step one's, 11-21 step two's, 22-32 the last's.
    assert sorted(set(polls)) == [0, 4, 8, 11, 15, 19, 22, 26, 30, 33]
    assert max(b - a for a, b in itertools.pairwise(polls)) <= ARRIVAL_POLL_TOKENS
    for stream in streams:
        await stream.aclose()
    await engine.stop()
