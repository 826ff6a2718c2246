"""The fixed-rate engine: each request owns its timeline; load changes nothing.

TTFT = ttft_overhead + prompt_tokens / prefill_rate, then one token every ITL:
``deadline_i = arrival + ttft + i * itl``. Deadlines are absolute, so time spent handling the
request before the engine (shorter than TTFT) is absorbed and wake-up lateness never accumulates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from llmsim.engine.base import Engine, EngineObserver, NullObserver, TokenStream
from llmsim.engine.clock import Clock
from llmsim.types import EngineSnapshot, FinishReason, GenerationPlan, RequestId, RequestStats, TokenEvent


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
    """One choice on its own timeline: token ``i`` is due at ``first + i * itl``."""

    # No prefix cache: nothing is ever cached.
    num_cached_tokens: int = 0

    __slots__ = ("_arrival", "_engine", "_first", "_itl", "_plan", "_released", "_reported", "_request_id")

    def __init__(self, engine: FixedEngine, plan: GenerationPlan, arrival: float, request_id: RequestId) -> None:
        self._engine = engine
        self._plan = plan
        self._arrival = arrival
        self._request_id = request_id
        self._first = arrival + engine.timing.ttft(plan.prompt_tokens)
        self._itl = engine.timing.itl_s
        self._released = 0
        self._reported = False

    def __aiter__(self) -> _FixedStream:
        return self

    async def __anext__(self) -> TokenEvent:
        # Per-token path: one absolute deadline each, computed from the anchor, never from "now".
        i = self._released
        tokens = self._plan.tokens
        if i >= len(tokens):
            self._report()
            raise StopAsyncIteration
        engine = self._engine
        deadline = self._first + i * self._itl
        # A deadline already passed (the stream is behind) costs no sleep_until call.
        if engine.clock.now() < deadline:
            await engine.clock.sleep_until(deadline)
        if i == 0:
            engine.observer.on_first_token(self._first - self._arrival)
        self._released = i + 1
        return TokenEvent(i, tokens[i], deadline)

    async def aclose(self) -> None:
        self._report()

    def _report(self) -> None:
        """Once, however the stream ended: its stats, and one fewer stream running."""
        if self._reported:
            return
        self._reported = True
        engine = self._engine
        engine.num_running -= 1
        plan = self._plan
        released = self._released
        done = released == plan.num_output_tokens
        token_times = [self._first + i * self._itl for i in range(released)]
        engine.observer.on_request_finished(
            RequestStats(
                request_id=self._request_id,
                prompt_tokens=plan.prompt_tokens,
                output_tokens=released,
                finish_reason=plan.finish_reason if done else FinishReason.ABORT,
                arrival=self._arrival,
                scheduled=self._arrival,
                first_token=self._first if released else None,
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

    async def submit(
        self, plans: Sequence[GenerationPlan], arrival: float, request_ids: Sequence[RequestId]
    ) -> list[TokenStream]:
        # No queue, no limit: every request is admitted at once.
        streams: list[TokenStream] = [
            _FixedStream(self, plan, arrival, rid) for plan, rid in zip(plans, request_ids, strict=True)
        ]
        self.num_running += len(streams)
        return streams

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(num_running=self.num_running, num_waiting=0, kv_used_blocks=0, kv_total_blocks=0)
