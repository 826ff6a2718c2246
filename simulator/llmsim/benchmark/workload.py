"""What a benchmark sends: chains of requests, open loop, closed loop, conversations or a replayed trace.

Everything is a *chain*: a first request at a scheduled time, and each later turn sent when the
previous one has ended plus a think time. One shape covers the usual loads::

    open loop      one chain per arrival (Poisson or constant rate, or a trace), one turn each
    closed loop    N chains starting together, turns back to back until the duration or count
    conversations  one chain per conversation, each turn's prompt holding the whole history

Prompts are *segments*: runs of tokens named by a key, so that equal keys mean equal tokens (a
system prompt shared by every request, a conversation's earlier turns) and distinct keys mean
distinct tokens (nothing for a prefix cache to find).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmsim.fleet.workload import FleetRequest, poisson_arrivals


class Role(enum.StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of prompt tokens: a chat message, or a stretch of token ids; equal keys give equal tokens."""

    role: Role
    key: tuple[int, ...]
    tokens: int


@dataclass(frozen=True, slots=True)
class Turn:
    """One request's shape."""

    prompt: tuple[Segment, ...]
    output_tokens: int
    # Seconds after its scheduled send at which the client hangs up (None: it reads to the end).
    abort_after: float | None = None

    @property
    def prompt_tokens(self) -> int:
        return sum(s.tokens for s in self.prompt)


#: A chain's turn ``j``, or None when the chain has no more.
TurnSource = Callable[[int], "Turn | None"]


@dataclass(frozen=True, slots=True)
class Chain:
    """Requests sent one after the other: turn ``j + 1`` leaves ``think_time`` after turn ``j`` ended."""

    # Scheduled send of the first turn, seconds from the start of the run.
    start: float
    turn: TurnSource
    think_time: float = 0.0
    # Sent and predicted but left out of every figure (an experiment's gate or keeper).
    background: bool = False


@dataclass(frozen=True, slots=True)
class Workload:
    chains: tuple[Chain, ...]
    # No request is scheduled at or after this (a closed loop's duration); in-flight ones finish.
    send_until: float = math.inf
    # Requests scheduled before this are sent but not counted.
    warmup: float = 0.0
    description: str = ""


class Shape(enum.StrEnum):
    """How prompts relate to each other (the fleet planner's workload shapes)."""

    # Every prompt distinct: no prefix in common.
    DISTINCT = "distinct"
    # A system prompt shared by all requests of a group, then a distinct question.
    SHARED_PREFIX = "shared-prefix"
    # Conversations: turn t's prompt is the history (t x (user + assistant)) plus a new user message.
    MULTI_TURN = "multi-turn"


@dataclass(frozen=True, slots=True)
class PromptShape:
    """Builds the turns of a chain.

    Parameters
    ----------
    prompt_tokens:
        distinct: each prompt's length; shared-prefix: the whole prompt, system prompt included;
        multi-turn: each new user message.
    output_tokens:
        Output tokens of every request (sent as max_tokens with ignore_eos).
    shape:
        See :class:`Shape`.
    system_prompt_tokens:
        shared-prefix: length of the shared system prompt.
    prefix_groups:
        shared-prefix: number of different system prompts; request ``i`` uses group ``i mod groups``.
    turns:
        multi-turn: turns per conversation (a closed-loop worker starts a new one after the last).
    """

    prompt_tokens: int
    output_tokens: int
    shape: Shape = Shape.DISTINCT
    system_prompt_tokens: int = 0
    prefix_groups: int = 1
    turns: int = 1

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError("prompt and output tokens must be >= 1")
        if self.shape is Shape.SHARED_PREFIX and not 0 < self.system_prompt_tokens < self.prompt_tokens:
            raise ValueError("a shared prefix needs 0 < system prompt tokens < prompt tokens")
        if self.prefix_groups < 1 or self.turns < 1:
            raise ValueError("prefix groups and turns must be >= 1")

    def turn(self, chain: int, index: int) -> Turn:
        """Turn ``index`` of chain ``chain``."""
        if self.shape is Shape.SHARED_PREFIX:
            system = Segment(Role.SYSTEM, (-1, (chain + index) % self.prefix_groups), self.system_prompt_tokens)
            question = Segment(Role.USER, (chain, index), self.prompt_tokens - self.system_prompt_tokens)
            return Turn((system, question), self.output_tokens)
        if self.shape is Shape.MULTI_TURN:
            conversation, t = divmod(index, self.turns)
            history: list[Segment] = []
            for i in range(t):
                history.append(Segment(Role.USER, (chain, conversation, i), self.prompt_tokens))
                history.append(Segment(Role.ASSISTANT, (chain, conversation, i, 1), self.output_tokens))
            history.append(Segment(Role.USER, (chain, conversation, t), self.prompt_tokens))
            return Turn(tuple(history), self.output_tokens)
        return Turn((Segment(Role.USER, (chain, index), self.prompt_tokens),), self.output_tokens)


def _once(turn: Turn) -> TurnSource:
    return lambda j: turn if j == 0 else None


def constant_arrivals(rate: float, duration: float) -> list[float]:
    """``rate`` evenly spaced arrivals per second over ``[0, duration)``, the first at 0."""
    if rate <= 0 or duration < 0:
        raise ValueError("rate must be > 0 and duration >= 0")
    return [i / rate for i in range(math.ceil(duration * rate - 1e-9))]


def first_arrivals(rate: float, count: int, *, poisson: bool, seed: int = 0) -> list[float]:
    """The first ``count`` arrivals of a seeded Poisson (or constant) process of ``rate`` per second."""
    if count < 0:
        raise ValueError("count must be >= 0")
    if not poisson:
        return [i / rate for i in range(count)]
    # The same seed draws the same gaps, so a longer horizon only extends the list.
    horizon = (count + 10) / rate
    while True:
        arrivals = poisson_arrivals(rate, horizon, seed)
        if len(arrivals) >= count:
            return arrivals[:count]
        horizon *= 2


def open_loop(arrivals: Sequence[float], prompts: PromptShape, *, warmup: float = 0.0) -> Workload:
    """One request per arrival, sent on schedule whether or not earlier ones have finished."""
    chains = tuple(Chain(t, _once(prompts.turn(i, 0))) for i, t in enumerate(arrivals))
    return Workload(chains, warmup=warmup, description=f"open loop, {len(chains)} requests")


def closed_loop(
    concurrency: int,
    prompts: PromptShape,
    *,
    duration: float | None = None,
    requests: int | None = None,
    think_time: float = 0.0,
    warmup: float = 0.0,
    start: float = 0.0,
) -> Workload:
    """``concurrency`` workers, each sending its next request when its last one ended (plus think time).

    With ``requests``, worker ``w`` sends ``requests // concurrency`` (one more for the first
    ``requests % concurrency`` workers); with ``duration``, workers send until then.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if (duration is None) == (requests is None):
        raise ValueError("give exactly one of duration and requests")

    def source(worker: int) -> TurnSource:
        quota = math.inf if requests is None else requests // concurrency + (worker < requests % concurrency)
        return lambda j: prompts.turn(worker, j) if j < quota else None

    chains = tuple(Chain(start, source(w), think_time) for w in range(concurrency))
    until = math.inf if duration is None else duration
    return Workload(chains, send_until=until, warmup=warmup, description=f"closed loop, {concurrency} streams")


def conversations(
    arrivals: Sequence[float], prompts: PromptShape, *, think_time: float, warmup: float = 0.0
) -> Workload:
    """One multi-turn conversation per arrival; each turn waits for the previous answer plus think time."""
    if prompts.shape is not Shape.MULTI_TURN:
        raise ValueError("conversations need the multi-turn shape")
    turns = prompts.turns

    def source(chain: int) -> TurnSource:
        return lambda j: prompts.turn(chain, j) if j < turns else None

    chains = tuple(Chain(t, source(i), think_time) for i, t in enumerate(arrivals))
    return Workload(chains, warmup=warmup, description=f"{len(chains)} conversations of {turns} turns")


def trace(items: Sequence[FleetRequest], *, warmup: float = 0.0) -> Workload:
    """Replay ``llmsim plan --workload`` items: distinct prompts of their lengths, hang-ups at ``abort_at``."""
    chains = []
    for i, item in enumerate(items):
        if item.prompt_tokens < 1 or item.output_tokens < 1:
            raise ValueError(f"request {i}: a request sent over HTTP needs prompt_tokens and output_tokens >= 1")
        if item.arrival < 0:
            raise ValueError(f"request {i}: arrival must be >= 0 (seconds from the start of the run)")
        abort = None if item.abort_at is None else max(0.0, item.abort_at - item.arrival)
        turn = Turn((Segment(Role.USER, (i, 0), item.prompt_tokens),), item.output_tokens, abort)
        chains.append(Chain(item.arrival, _once(turn)))
    return Workload(tuple(chains), warmup=warmup, description=f"trace of {len(chains)} requests")
