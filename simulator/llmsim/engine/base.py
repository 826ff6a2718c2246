"""The engine interface every timing model implements."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

from llmsim.types import EngineSnapshot, GenerationPlan, RemotePrefill, RequestId, RequestStats, StepStats, TokenEvent


class EngineObserver(Protocol):
    """Where engines report; runtime.py wires it to the metrics layer."""

    def on_step(self, stats: StepStats) -> None: ...

    def on_first_token(self, ttft: float) -> None: ...

    def on_request_finished(self, stats: RequestStats) -> None: ...


class NullObserver:
    """Observer that drops everything (tests, virtual-time runs)."""

    def on_step(self, stats: StepStats) -> None:
        pass

    def on_first_token(self, ttft: float) -> None:
        pass

    def on_request_finished(self, stats: RequestStats) -> None:
        pass


class ObserverGroup:
    """Several observers as one (runtime.py: the metrics and the KV-events publisher of a model)."""

    __slots__ = ("_observers",)

    def __init__(self, *observers: EngineObserver) -> None:
        self._observers = observers

    def on_step(self, stats: StepStats) -> None:
        for observer in self._observers:
            observer.on_step(stats)

    def on_first_token(self, ttft: float) -> None:
        for observer in self._observers:
            observer.on_first_token(ttft)

    def on_request_finished(self, stats: RequestStats) -> None:
        for observer in self._observers:
            observer.on_request_finished(stats)


#: Called by an engine at the moment it releases a token; True when the consumer took it (wrote it),
#: False to have it queued and pulled instead. Must not block or await.
TokenSink = Callable[[TokenEvent], bool]

#: Called by an engine ahead of a release, while it waits for the deadline, with the very event it
#: will then hand to the sink: the consumer may prepare what it writes (encode the chunk) so that
#: the release itself is little more than the write. The event may never be released (the stream
#: can end during the wait), so it must change nothing the consumer says. Must not block or await.
TokenPrepare = Callable[[TokenEvent], None]


class TokenStream(Protocol):
    """One admitted choice's tokens, pulled by the API one :class:`TokenEvent` at a time.

    ``aclose`` must be called however the consumer stops (the API always does): a stream closed
    before its last token is aborted and frees what it holds. Closing twice is harmless.
    A stream the engine aborts raises :class:`~llmsim.engine.errors.RequestAborted`.
    A plan's ``pacing`` (if any) moves its tokens' deadlines; events carry the moved deadline.

    ``attach(sink)`` offers the tokens by push as well: an engine that releases many streams at
    one instant (the scheduler's step) hands each token to its sink right there, instead of waking
    one consumer task per stream; whatever a sink refuses is queued and pulled as usual, in order.
    It returns False when the engine does not push (each token has its own timer anyway).
    With ``prepare``, an engine that knows a release ahead (the scheduler, during the step it
    waits out) shows each event to ``prepare`` first, then hands the same event to ``sink`` at
    the deadline, unless the stream ended in between.
    """

    #: Prompt tokens found in the engine's prefix cache (vLLM's ``num_cached_tokens``); final
    #: once the first token is out, 0 for engines without a cache.
    num_cached_tokens: int

    def __aiter__(self) -> TokenStream: ...

    async def __anext__(self) -> TokenEvent: ...

    async def aclose(self) -> None: ...

    def attach(self, sink: TokenSink, prepare: TokenPrepare | None = None) -> bool: ...


class Engine(abc.ABC):
    """Releases the tokens of plans over time.

    ``submit`` decides admission for every choice of a request at once, before the API starts
    its response: either all choices get a :class:`TokenStream`, or it raises
    :class:`~llmsim.engine.errors.EngineOverloaded` and none is queued.
    """

    #: Sections of a model's config this engine needs (checked at startup by runtime.py).
    required_sections: ClassVar[frozenset[str]] = frozenset()
    #: Name users write in models.yml.
    name: ClassVar[str]

    async def start(self) -> None:
        """Start background work (the scheduler's step loop). Called once before traffic."""

    async def stop(self) -> None:
        """Stop background work; open streams end with :class:`~llmsim.engine.errors.RequestAborted`."""

    @abc.abstractmethod
    def abort_requests(self) -> int:
        """Abort every request in flight (vLLM's shutdown and sleep with mode ``abort``); return how many.

        Their streams raise :class:`~llmsim.engine.errors.RequestAborted` after the tokens already
        released; the engine keeps serving new requests.
        """

    @abc.abstractmethod
    async def submit(
        self, plans: Sequence[GenerationPlan], arrival: float, request_ids: Sequence[RequestId]
    ) -> list[TokenStream]:
        """Admit ``plans`` (the choices of one request, ids alike) arriving at ``arrival`` on the engine clock.

        Raises :class:`~llmsim.engine.errors.EngineOverloaded` when the engine refuses them, and
        :class:`~llmsim.engine.errors.EngineStopped` when it no longer serves.
        """

    @abc.abstractmethod
    def snapshot(self) -> EngineSnapshot:
        """Live running/waiting/KV figures, cheap enough to call on every scrape."""

    def add_lora(self, name: str, path: str) -> None:
        """Load LoRA adapter ``name`` from ``path`` (again: in place). Plans may then name it.

        Engines without batches have nothing to limit or load: they run an adapter as the base model.
        """

    def remove_lora(self, name: str) -> None:
        """Forget adapter ``name``; sequences already running with it finish with it."""

    def reset_prefix_cache(self) -> bool:
        """Forget every cached KV block; False when the engine cannot now (requests hold blocks)."""
        return True

    def held_blocks(self, request_id: str) -> tuple[int, ...] | None:
        """Disaggregated prefill/decode: the blocks a finished prefill leg still holds for a pull
        (None: not held, never or no longer). Engines without a KV cache hold none."""
        return None

    def release_held(self, request_id: str) -> bool:
        """A decode replica pulled prefill leg ``request_id``'s blocks: free them (False: not held)."""
        return False


class KVPeer(Protocol):
    """The decode side's line to prefill replicas (disaggregated prefill/decode), injected into an
    engine by the composition root: the engine decides when, the peer does the I/O."""

    async def check(self, remote: RemotePrefill) -> bool:
        """Whether the prefill replica still holds the request's blocks (False: unreachable, restarted, freed)."""
        ...

    async def release(self, remote: RemotePrefill) -> None:
        """Tell the prefill replica the pull is done (or given up): it frees the blocks. Never raises."""
        ...
