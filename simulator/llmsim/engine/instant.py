"""The instant engine: zero simulated latency."""

from __future__ import annotations

from typing import ClassVar

from llmsim.engine.base import EngineObserver
from llmsim.engine.clock import Clock
from llmsim.engine.fixed import FixedEngine, FixedTiming


class InstantEngine(FixedEngine):
    """Every token is due at the request's arrival, for functional tests of clients and gateways.

    The simulated TTFT and ITL are 0; the time the server takes to answer shows as lag.
    """

    name: ClassVar[str] = "instant"
    required_sections: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, clock: Clock, observer: EngineObserver | None = None) -> None:
        super().__init__(FixedTiming(ttft_overhead_s=0.0, prefill_tokens_per_s=None, itl_s=0.0), clock, observer)
