"""The scheduler engine on a clock: the only module of the package that touches asyncio or time.

One background task owns the simulated GPU::

    schedule -> cost -> deadline = step_start + duration -> lag = await clock.sleep_until(deadline)
             -> update -> one TokenEvent to every sequence that sampled a token -> observers
             -> step_start = deadline

The timeline is anchored: a late wake-up shows up as lag and never shifts the next step.
Requests wait in an inbox ordered by arrival stamp and join the first step that starts at or
after their arrival (so a request arriving mid-step joins the next one, as on a real GPU). When
there is nothing to do the loop waits for a request and restarts the timeline at
max(its arrival stamp, end of the last step) - the stamp, not "now".

Each ``run()`` consumer owns a deque of released events and, while it waits, one future; the
loop appends and wakes it. No asyncio.Queue per request, nothing per token beyond the event.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import suppress
from typing import ClassVar

from llmsim.engine.base import Engine, EngineObserver, NullObserver
from llmsim.engine.clock import Clock
from llmsim.engine.errors import EngineOverloaded
from llmsim.engine.scheduler.params import SchedulerParams
from llmsim.engine.scheduler.scheduler import Scheduler
from llmsim.engine.scheduler.sequence import Sequence, SequenceStatus
from llmsim.types import EngineSnapshot, GenerationPlan, RequestId, TokenEvent

logger = logging.getLogger(__name__)

_WAITING = SequenceStatus.WAITING
_FINISHED = SequenceStatus.FINISHED
_ABORTED = SequenceStatus.ABORTED


class _Stream(Sequence):
    """A sequence plus its consumer's channel."""

    __slots__ = ("events", "plan", "waiter")

    def __init__(self, plan: GenerationPlan, arrival: float, request_id: RequestId) -> None:
        Sequence.__init__(self, request_id, arrival, plan.prompt_tokens, plan.num_output_tokens, plan.finish_reason)
        self.plan = plan
        self.events: deque[TokenEvent] = deque()
        # Set while the consumer waits for the next event.
        self.waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)


class SchedulerEngine(Engine):
    """Continuous batching on one simulated GPU (see :mod:`llmsim.engine.scheduler.scheduler`).

    Parameters
    ----------
    params:
        GPU, model and scheduler numbers.
    clock:
        The engine's only view of time; arrival stamps passed to :meth:`run` are on it.
    observer:
        Receives every step's stats, first tokens and finished requests.
    """

    name: ClassVar[str] = "scheduler"
    required_sections: ClassVar[frozenset[str]] = frozenset({"hardware", "weights", "kv_cache"})

    def __init__(self, params: SchedulerParams, clock: Clock, observer: EngineObserver | None = None) -> None:
        self._params = params
        self._clock = clock
        self._observer: EngineObserver = observer or NullObserver()
        self._scheduler: Scheduler[_Stream] = Scheduler(params)
        # (arrival, submission number, stream): a heap, so the waiting queue is in arrival order.
        self._inbox: list[tuple[float, int, _Stream]] = []
        self._submitted = 0
        self._live: set[_Stream] = set()
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._timeline_end = -math.inf
        self._closed = False
        self._failure: BaseException | None = None

    @property
    def num_kv_blocks(self) -> int:
        return self._scheduler.kv.num_blocks

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._step_loop(), name="llmsim-scheduler")
            self._task.add_done_callback(self._loop_done)
            logger.debug("scheduler engine started: %d KV blocks", self.num_kv_blocks)

    async def stop(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():  # a failed loop's error was already logged
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
        for stream in list(self._live):
            stream.wake()

    def _loop_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("scheduler step loop failed", exc_info=exc)
            self._failure = exc
            for stream in list(self._live):
                stream.wake()

    # -- requests -------------------------------------------------------------------------

    def _num_waiting(self) -> int:
        return len(self._inbox) + len(self._scheduler.waiting)

    def accepting(self) -> bool:
        limit = self._params.max_waiting_requests
        return not self._closed and self._failure is None and (limit is None or self._num_waiting() < limit)

    async def run(
        self, plan: GenerationPlan, arrival: float, request_id: RequestId
    ) -> AsyncGenerator[TokenEvent, None]:
        if self._closed or self._failure is not None:
            raise RuntimeError("the scheduler engine is not running")
        limit = self._params.max_waiting_requests
        if limit is not None and self._num_waiting() >= limit:
            raise EngineOverloaded(self._num_waiting(), limit)
        stream = _Stream(plan, arrival, request_id)
        stream.limit_to_context(self._params.context_length)  # raise here, not in the step loop
        heapq.heappush(self._inbox, (arrival, self._submitted, stream))
        self._submitted += 1
        self._live.add(stream)
        await self.start()
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)
        events = stream.events
        loop = asyncio.get_running_loop()
        try:
            while True:
                while events:
                    yield events.popleft()
                if stream.status >= _FINISHED or self._closed:
                    return
                if self._failure is not None:
                    raise RuntimeError("the scheduler step loop failed") from self._failure
                waiter: asyncio.Future[None] = loop.create_future()
                stream.waiter = waiter
                await waiter
        finally:
            self._live.discard(stream)
            stream.waiter = None
            if stream.status < _FINISHED:
                self._abort(stream)

    def _abort(self, stream: _Stream) -> None:
        now = max(self._clock.now(), stream.arrival)
        for i, entry in enumerate(self._inbox):
            if entry[2] is stream:
                self._inbox[i] = self._inbox[-1]
                self._inbox.pop()
                heapq.heapify(self._inbox)
                stream.status = _ABORTED
                stream.finished_time = now
                break
        else:
            self._scheduler.abort(stream, now)
        self._observer.on_request_finished(stream.to_stats())

    def snapshot(self) -> EngineSnapshot:
        kv = self._scheduler.kv
        return EngineSnapshot(
            num_running=len(self._scheduler.running),
            num_waiting=self._num_waiting(),
            kv_used_blocks=kv.num_used,
            kv_total_blocks=kv.num_blocks,
        )

    # -- the step loop --------------------------------------------------------------------

    async def _step_loop(self) -> None:
        sched = self._scheduler
        step_duration = sched.cost.step_duration
        clock = self._clock
        observer = self._observer
        inbox = self._inbox
        loop = asyncio.get_running_loop()
        step_start = self._timeline_end
        while True:
            if not sched.has_work():
                if not inbox:
                    self._wakeup = loop.create_future()
                    await self._wakeup
                    self._wakeup = None
                    continue
                # Idle restart: anchored at the arrival stamp, never at "now".
                if inbox[0][0] > step_start:
                    step_start = inbox[0][0]
            while inbox and inbox[0][0] <= step_start:
                sched.add_request(heapq.heappop(inbox)[2])
            out = sched.schedule(step_start)
            duration = step_duration(out.num_tokens, out.num_context_tokens)
            deadline = step_start + duration
            lag = await clock.sleep_until(deadline)
            if lag > 0.0:
                # A late deadline returns without suspending: yield anyway, or a loop running
                # behind would starve its consumers and new arrivals until it caught up.
                await asyncio.sleep(0)
            result = sched.update_from_output(out, deadline)
            self._timeline_end = deadline
            # Once per released token: one TokenEvent, one wake-up, nothing else allocated.
            for stream in result.released:
                index = stream.num_output_tokens - 1
                scheduled = stream.scheduled_time
                assert scheduled is not None
                queue_time = scheduled - stream.arrival
                stream.events.append(TokenEvent(index, stream.plan.tokens[index], deadline, lag, queue_time))
                if index == 0:
                    observer.on_first_token(stream.request_id, deadline - stream.arrival, queue_time)
                stream.wake()
            observer.on_step(sched.step_stats(out, step_start, duration, lag))
            for stream in result.finished:
                stream.wake()  # a plan with no tokens ends without a release
                observer.on_request_finished(stream.to_stats())
            step_start = deadline
