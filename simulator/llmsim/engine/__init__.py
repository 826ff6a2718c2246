"""Engines decide *when* each token is sent.

An engine turns a :class:`~llmsim.types.GenerationPlan` and an arrival time into a stream of
:class:`~llmsim.types.TokenEvent`. Engines never read content, HTTP or metrics: they take plain
numbers, read time only through an injected :class:`~llmsim.engine.clock.Clock`, and report
through an :class:`~llmsim.engine.base.EngineObserver`.
"""

from llmsim.engine.base import (
    Engine,
    EngineObserver,
    KVPeer,
    NullObserver,
    ObserverGroup,
    TokenPrepare,
    TokenSink,
    TokenStream,
)
from llmsim.engine.clock import Clock, MonotonicClock

__all__ = [
    "Clock",
    "Engine",
    "EngineObserver",
    "KVPeer",
    "MonotonicClock",
    "NullObserver",
    "ObserverGroup",
    "TokenPrepare",
    "TokenSink",
    "TokenStream",
]
