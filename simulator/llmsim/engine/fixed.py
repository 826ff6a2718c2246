"""The fixed-rate engine: each request owns its timeline; load changes nothing.

TTFT = ttft_overhead + prompt_tokens / prefill_rate, then one token every ITL:
``deadline_i = arrival + ttft + i * itl``. Deadlines are absolute, so time spent handling the
request before the engine (shorter than TTFT) is absorbed and wake-up lateness never accumulates.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import ClassVar

from llmsim.engine.base import Engine, EngineObserver, NullObserver
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


class FixedEngine(Engine):
    name: ClassVar[str] = "fixed"
    required_sections: ClassVar[frozenset[str]] = frozenset({"latency"})

    def __init__(self, timing: FixedTiming, clock: Clock, observer: EngineObserver | None = None) -> None:
        self._timing = timing
        self._clock = clock
        self._observer = observer or NullObserver()
        self._running = 0

    async def run(
        self, plan: GenerationPlan, arrival: float, request_id: RequestId
    ) -> AsyncGenerator[TokenEvent, None]:
        first = arrival + self._timing.ttft(plan.prompt_tokens)
        itl = self._timing.itl_s
        now = self._clock.now
        sleep_until = self._clock.sleep_until
        self._running += 1
        released = 0
        try:
            # Per-token loop: one absolute deadline each, computed from the anchor, never from "now".
            for i, text in enumerate(plan.tokens):
                deadline = first + i * itl
                # A deadline already passed (the stream is behind) costs no sleep_until call.
                late = now() - deadline
                lag = late if late >= 0.0 else await sleep_until(deadline)
                if i == 0:
                    self._observer.on_first_token(request_id, first - arrival, 0.0)
                released = i + 1
                yield TokenEvent(i, text, deadline, lag, 0.0)
        finally:
            self._running -= 1
            done = released == plan.num_output_tokens
            token_times = [first + i * itl for i in range(released)]
            self._observer.on_request_finished(
                RequestStats(
                    request_id=request_id,
                    prompt_tokens=plan.prompt_tokens,
                    output_tokens=released,
                    finish_reason=plan.finish_reason if done else FinishReason.ABORT,
                    arrival=arrival,
                    scheduled=arrival,
                    first_token=first if released else None,
                    # Simulated end: the last release, or the moment of the abort.
                    finished=token_times[-1] if done and released else max(self._clock.now(), arrival),
                    token_times=token_times,
                )
            )

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(num_running=self._running, num_waiting=0, kv_used_blocks=0, kv_total_blocks=0)
