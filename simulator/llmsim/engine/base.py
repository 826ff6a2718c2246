"""The engine interface every timing model implements."""

from __future__ import annotations

import abc
from collections.abc import AsyncGenerator
from typing import ClassVar, Protocol

from llmsim.types import EngineSnapshot, GenerationPlan, RequestId, RequestStats, StepStats, TokenEvent


class EngineObserver(Protocol):
    """Where engines report; runtime.py wires it to the metrics layer."""

    def on_step(self, stats: StepStats) -> None: ...

    def on_first_token(self, request_id: RequestId, ttft: float, queue_time: float) -> None: ...

    def on_request_finished(self, stats: RequestStats) -> None: ...


class NullObserver:
    """Observer that drops everything (tests, virtual-time runs)."""

    def on_step(self, stats: StepStats) -> None:
        pass

    def on_first_token(self, request_id: RequestId, ttft: float, queue_time: float) -> None:
        pass

    def on_request_finished(self, stats: RequestStats) -> None:
        pass


class Engine(abc.ABC):
    """Releases the tokens of a plan over time.

    ``run`` is an async generator: the API pulls one :class:`TokenEvent` per token and writes a
    chunk for each. When the client goes away the API closes the iterator (``aclose``), and the
    engine's ``finally:`` frees whatever the request held and reports it as aborted.
    """

    #: Sections of a model's config this engine needs (checked at startup by runtime.py).
    required_sections: ClassVar[frozenset[str]] = frozenset()
    #: Name users write in models.yml.
    name: ClassVar[str]

    async def start(self) -> None:
        """Start background work (the scheduler's step loop). Called once before traffic."""

    async def stop(self) -> None:
        """Stop background work; in-flight iterators end."""

    @abc.abstractmethod
    def run(self, plan: GenerationPlan, arrival: float, request_id: RequestId) -> AsyncGenerator[TokenEvent, None]:
        """Release ``plan``'s tokens; ``arrival`` is the request's stamp on the engine clock."""

    def accepting(self) -> bool:
        """False when a new request would be refused (queue full): the API answers 503 up front."""
        return True

    @abc.abstractmethod
    def snapshot(self) -> EngineSnapshot:
        """Live running/waiting/KV figures, cheap enough to call on every scrape."""
