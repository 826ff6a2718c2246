"""The fixed-rate engine: each request owns its timeline; load changes nothing.

TTFT = ttft_overhead + prompt_tokens / prefill_rate, then one token every ITL:
``deadline_i = arrival + ttft + i * itl``. Deadlines are absolute, so time spent handling the
request before the engine (shorter than TTFT) is absorbed and wake-up lateness never accumulates.
A plan's :class:`~llmsim.types.Pacing` is part of that timeline: TTFT and ITL are multiplied by
its slowdown and its pause is added from its token on, so the engine's stats (and the metrics)
see the paced times.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from llmsim.engine.base import Engine, EngineObserver, NullObserver, TokenPrepare, TokenSink, TokenStream
from llmsim.engine.clock import Clock
from llmsim.engine.errors import RequestAborted
from llmsim.types import EngineSnapshot, FinishReason, GenerationPlan, RequestId, RequestStats, TokenEvent

# ``pause_at`` of a stream without a pause: no token index reaches it.
_NEVER = sys.maxsize


@dataclass(frozen=True, slots=True)
class FixedTiming:
    """The fixed engine's timeline, in seconds."""

    ttft_overhead_s: float
    # Prompt tokens processed per second before the first token; None: prompt length is free.
    prefill_tokens_per_s: float | None
    itl_s: float

    def ttft(self, prompt_tokens: int) -> float:
        if self.prefill_tokens_per_s is None:
            return self.ttft_overhead_s
        return self.ttft_overhead_s + prompt_tokens / self.prefill_tokens_per_s


class _FixedStream:
    """One choice on its own timeline: token ``i`` is due at ``first + i * itl`` (+ ``pause`` from ``pause_at``)."""

    __slots__ = (
        "_aborted",
        "_arrival",
        "_engine",
        "_first",
        "_itl",
        "_pause",
        "_pause_at",
        "_plan",
        "_released",
        "_reported",
        "_request_id",
        "_sleeper",
    )
    # No prefix cache: nothing is ever cached.
    num_cached_tokens: int = 0

    def __init__(self, engine: FixedEngine, plan: GenerationPlan, arrival: float, request_id: RequestId) -> None:
        self._engine = engine
        self._plan = plan
        self._arrival = arrival
        self._request_id = request_id
        ttft = engine.timing.ttft(plan.prompt_tokens)
        itl = engine.timing.itl_s
        self._pause_at = _NEVER
        self._pause = 0.0
        pacing = plan.pacing
        if pacing is not None:
            ttft *= pacing.slowdown
            itl *= pacing.slowdown
            self._pause_at = pacing.pause_at
            self._pause = pacing.pause_s
        self._first = arrival + ttft
        self._itl = itl
        self._released = 0
        self._reported = False
        self._aborted = False
        # The consumer's task while it waits for a deadline: what abort() interrupts.
        self._sleeper: asyncio.Task[object] | None = None

    def _deadline(self, i: int) -> float:
        deadline = self._first + i * self._itl
        return deadline + self._pause if i >= self._pause_at else deadline

    def __aiter__(self) -> _FixedStream:
        return self

    async def __anext__(self) -> TokenEvent:
        # Per-token path: one absolute deadline each, computed from the anchor, never from "now".
        i = self._released
        tokens = self._plan.tokens
        if i >= len(tokens):
            self._report()
            raise StopAsyncIteration
        if self._aborted:
            raise RequestAborted("the engine aborted the request")
        engine = self._engine
        deadline = self._first + i * self._itl
        if i >= self._pause_at:
            deadline += self._pause
        # A deadline already passed (the stream is behind) costs no sleep_until call.
        if engine.clock.now() < deadline:
            self._sleeper = asyncio.current_task()
            try:
                await engine.clock.sleep_until(deadline)
            except asyncio.CancelledError:
                if not self._take_cancellation():
                    raise
                raise RequestAborted("the engine aborted the request") from None
            finally:
                self._sleeper = None
        if i == 0:
            engine.observer.on_first_token(self._deadline(0) - self._arrival)
        self._released = i + 1
        return TokenEvent(i, tokens[i], deadline)

    async def aclose(self) -> None:
        self._report()

    def abort(self) -> None:
        """End the stream now: its consumer gets RequestAborted (at once, even mid-wait)."""
        if self._aborted or self._reported:
            return
        self._aborted = True
        self._report()
        sleeper = self._sleeper
        if sleeper is not None:
            sleeper.cancel()

    def _take_cancellation(self) -> bool:
        """True when the wait was cancelled by :meth:`abort`: the cancellation is consumed here."""
        if not self._aborted:
            return False  # someone else's (the client left, shutdown): it goes on
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return True

    def attach(self, sink: TokenSink, prepare: TokenPrepare | None = None) -> bool:
        # Every token has its own deadline and timer: nothing is released in batches to push.
        return False

    def _report(self) -> None:
        """Once, however the stream ended: its stats, and one fewer stream running."""
        if self._reported:
            return
        self._reported = True
        engine = self._engine
        engine.num_running -= 1
        engine.live.discard(self)
        plan = self._plan
        released = self._released
        done = released == plan.num_output_tokens
        token_times = [self._deadline(i) for i in range(released)]
        engine.observer.on_request_finished(
            RequestStats(
                request_id=self._request_id,
                prompt_tokens=plan.prompt_tokens,
                output_tokens=released,
                finish_reason=plan.finish_reason if done else FinishReason.ABORT,
                arrival=self._arrival,
                scheduled=self._arrival,
                first_token=token_times[0] if released else None,
                # Simulated end: the last release, or the moment of the abort.
                finished=token_times[-1] if done and released else max(engine.clock.now(), self._arrival),
                token_times=token_times,
            )
        )


class FixedEngine(Engine):
    name: ClassVar[str] = "fixed"
    required_sections: ClassVar[frozenset[str]] = frozenset({"latency"})

    def __init__(self, timing: FixedTiming, clock: Clock, observer: EngineObserver | None = None) -> None:
        self.timing = timing
        self.clock = clock
        self.observer: EngineObserver = observer or NullObserver()
        # Streams submitted and not yet reported.
        self.num_running = 0
        self.live: set[_FixedStream] = set()

    async def stop(self) -> None:
        self.abort_requests()

    def abort_requests(self) -> int:
        streams = list(self.live)
        for stream in streams:
            stream.abort()
        return len(streams)

    async def submit(
        self, plans: Sequence[GenerationPlan], arrival: float, request_ids: Sequence[RequestId]
    ) -> list[TokenStream]:
        # No queue, no limit: every request is admitted at once.
        streams = [_FixedStream(self, plan, arrival, rid) for plan, rid in zip(plans, request_ids, strict=True)]
        self.num_running += len(streams)
        self.live.update(streams)
        return list(streams)

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(num_running=self.num_running, num_waiting=0, kv_used_blocks=0, kv_total_blocks=0)
