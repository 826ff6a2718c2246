"""The instant engine: every token at once, no simulated time passes."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import ClassVar

from llmsim.engine.base import Engine, EngineObserver, NullObserver
from llmsim.engine.clock import Clock
from llmsim.types import EngineSnapshot, FinishReason, GenerationPlan, RequestId, RequestStats, TokenEvent


class InstantEngine(Engine):
    """Releases a plan's tokens immediately, for functional tests of clients and gateways."""

    name: ClassVar[str] = "instant"
    required_sections: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, clock: Clock, observer: EngineObserver | None = None) -> None:
        self._clock = clock
        self._observer = observer or NullObserver()
        self._running = 0

    async def run(
        self, plan: GenerationPlan, arrival: float, request_id: RequestId
    ) -> AsyncGenerator[TokenEvent, None]:
        self._running += 1
        released = 0
        try:
            now = self._clock.now()
            if plan.tokens:
                self._observer.on_first_token(request_id, now - arrival, 0.0)
            for i, text in enumerate(plan.tokens):
                released = i + 1
                yield TokenEvent(i, text, now, 0.0, 0.0)
        finally:
            self._running -= 1
            now = self._clock.now()
            done = released == plan.num_output_tokens
            self._observer.on_request_finished(
                RequestStats(
                    request_id=request_id,
                    prompt_tokens=plan.prompt_tokens,
                    output_tokens=released,
                    finish_reason=plan.finish_reason if done else FinishReason.ABORT,
                    arrival=arrival,
                    scheduled=arrival,
                    first_token=now if released else None,
                    finished=now,
                    token_times=[now] * released,
                )
            )

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(num_running=self._running, num_waiting=0, kv_used_blocks=0, kv_total_blocks=0)
