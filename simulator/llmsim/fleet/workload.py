"""What a fleet is asked to serve: requests, when each is sent, and the shapes gateway tests use.

A request is sent either at an absolute ``arrival`` (open loop: a trace, Poisson, constant rate,
bursts) or ``arrival`` seconds after the request it ``follows`` has ended (the next turn of a
conversation, after the user read the answer). ``max_concurrency`` caps the requests in flight
on the client side, as ``vllm bench serve --max-concurrency`` does: a request whose time has come
waits for a free slot and is sent when one frees, so ``max_concurrency=C`` with every arrival at
0 is a closed loop of C clients.

Everything here is seeded: the same arguments give the same workload in every process.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from llmsim.fleet.prompt import Prompt, Segment

ArrivalPattern = Literal["poisson", "constant", "bursts"]
ARRIVAL_PATTERNS: tuple[ArrivalPattern, ...] = ("poisson", "constant", "bursts")


@dataclass(frozen=True, slots=True)
class FleetRequest:
    """One request of a fleet workload."""

    prompt: Prompt
    output_tokens: int
    # Seconds on the simulated timeline; with ``follows``, seconds after that request ended.
    arrival: float = 0.0
    # Index of the request whose end releases this one (an earlier index), or None.
    follows: int | None = None
    # When the client goes away (absolute seconds); only for requests with an absolute arrival.
    abort_at: float | None = None
    # LoRA adapter the request names (one of its replica's adapters; None: the base model).
    adapter: str | None = None
    # The text of the output tokens (of the first ones, if shorter), when a later prompt quotes
    # it (the next turn of a conversation): the blocks the answer fills are then cached under the same identities as
    # that prompt's, as vLLM caches output blocks. None: an answer nobody quotes.
    answer: Segment | None = None
    # False: the prefix cache sees none of its blocks (a single-replica workload item given
    # without token ids: it neither hits nor is hit, not even by itself after a preemption).
    cacheable: bool = True
    # Disaggregated fleets: seconds the router takes between this request's prefill answer and
    # its decode leg (a recorded trace's, measured at a real router); None: the fleet's
    # ``router.handoff_ms``.
    handoff: float | None = None

    @property
    def prompt_tokens(self) -> int:
        return self.prompt.num_tokens

    @property
    def prompt_token_ids(self) -> tuple[int, ...] | None:
        """The prompt's token ids when it gives them (one explicit segment), else None."""
        segments = self.prompt.segments
        return segments[0].ids if len(segments) == 1 else None

    @property
    def output_token_ids(self) -> tuple[int, ...] | None:
        """The ids of its (first) outputs, when given."""
        return self.answer.ids if self.answer is not None else None

    @classmethod
    def of(
        cls,
        arrival: float,
        prompt_tokens: int,
        output_tokens: int,
        abort_at: float | None = None,
        prompt_token_ids: tuple[int, ...] | None = None,
        output_token_ids: tuple[int, ...] | None = None,
        *,
        adapter: str | None = None,
    ) -> FleetRequest:
        """A request known by its lengths, or by its token ids (a trace's, a benchmark's).

        With ``prompt_token_ids`` (``prompt_tokens`` of them) its blocks are hashed from the ids,
        as vLLM hashes them, and ``output_token_ids`` (its first outputs') extend them as they are
        computed. Without, the prefix cache cannot see its content: it neither hits nor is hit.
        """
        known = prompt_token_ids is not None and len(prompt_token_ids) == prompt_tokens
        if known:
            prompt = Prompt((Segment("ids", prompt_tokens, prompt_token_ids),))
        else:
            prompt = Prompt.unique("request", prompt_tokens)
        answer = None
        if known and output_token_ids is not None and len(output_token_ids) <= output_tokens:
            answer = Segment("answer-ids", len(output_token_ids), output_token_ids)
        return cls(prompt, output_tokens, arrival, None, abort_at, adapter, answer, cacheable=known)


@dataclass(frozen=True, slots=True)
class FleetWorkload:
    """Requests in index order, and the client-side concurrency limit (None: open loop)."""

    requests: tuple[FleetRequest, ...]
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        for i, r in enumerate(self.requests):
            if r.output_tokens < 0:
                raise ValueError(f"request {i}: output_tokens must be >= 0")
            if not math.isfinite(r.arrival) or (r.follows is not None and r.arrival < 0):
                raise ValueError(f"request {i}: arrival must be finite (and >= 0 after the request it follows)")
            if r.handoff is not None and not 0 <= r.handoff < math.inf:
                raise ValueError(f"request {i}: handoff must be >= 0 and finite, got {r.handoff}")
            if r.follows is not None:
                if not 0 <= r.follows < i:
                    raise ValueError(f"request {i}: follows must name an earlier request, got {r.follows}")
                if r.abort_at is not None:
                    raise ValueError(f"request {i}: abort_at needs an absolute arrival (not follows)")
            if r.answer is not None and r.answer.length > r.output_tokens:
                raise ValueError(f"request {i}: the answer segment must be at most output_tokens long")

    def own_text_starts(self) -> list[int | None]:
        """Per request: the token where text no other request holds begins, in its prompt and then
        its answer (None: every token of it may be another request's too).

        Text is a segment's key (two synthetic keys never give the same tokens); a key that one
        request alone names is that request's own, and so is every block from its start on (a
        block's identity chains everything before it). Explicit ids are never judged by key: two
        keys may hold the same ids. What :class:`~llmsim.fleet.replica.Replica` tells the prefix
        cache, which then keeps such blocks out of its map (``Sequence.num_shareable_blocks``).
        """
        # Occurrences, not requests: a key twice in one request's text counts as shared, which
        # only keeps blocks mapped that need not be (one C-level count over the workload).
        texts = [_text(r) for r in self.requests]
        holders = Counter(s.key for text in texts for s in text if s.ids is None)
        starts: list[int | None] = []
        for text in texts:
            start: int | None = None
            offset = 0
            for segment in text:
                if segment.ids is None and segment.length and holders[segment.key] == 1:
                    start = offset
                    break
                offset += segment.length
            starts.append(start)
        return starts

    def __len__(self) -> int:
        return len(self.requests)


def poisson_arrivals(rate: float, duration: float, seed: int = 0) -> list[float]:
    """Arrival times of a Poisson process of ``rate`` per second over ``[0, duration)``; same seed, same list."""
    if rate <= 0 or duration < 0:
        raise ValueError("rate must be > 0 and duration >= 0")
    rng = random.Random(seed)
    arrivals: list[float] = []
    t = rng.expovariate(rate)
    while t < duration:
        arrivals.append(t)
        t += rng.expovariate(rate)
    return arrivals


def poisson_workload(
    rate: float, duration: float, prompt_tokens: int, output_tokens: int, seed: int = 0
) -> list[FleetRequest]:
    """Fixed-length requests arriving as a seeded Poisson process (an open loop), known by their lengths."""
    return [FleetRequest.of(t, prompt_tokens, output_tokens) for t in poisson_arrivals(rate, duration, seed)]


def closed_loop(concurrency: int, num_requests: int, prompt_tokens: int, output_tokens: int) -> FleetWorkload:
    """``concurrency`` clients sending ``num_requests`` requests back to back (``vllm bench serve
    --max-concurrency C --request-rate inf``): every prompt distinct, so no prefix is shared."""
    if num_requests < 0:
        raise ValueError(f"num_requests must be >= 0, got {num_requests}")
    return FleetWorkload(
        tuple(FleetRequest(Prompt.unique(f"request:{i}", prompt_tokens), output_tokens) for i in range(num_requests)),
        max_concurrency=concurrency,
    )


@dataclass(frozen=True, slots=True)
class WorkloadShape:
    """A generated open-loop workload.

    ``rate`` counts conversations when ``turns`` > 1 (each then sends ``turns`` requests).
    """

    rate: float
    duration: float
    # Each request's own text (the user message of each turn), after any system prompt.
    prompt_tokens: int
    output_tokens: int
    arrivals: ArrivalPattern = "poisson"
    # Requests sent at the same instant in each burst (arrivals "bursts"); bursts are
    # ``burst_size / rate`` seconds apart, so the mean rate is ``rate``.
    burst_size: int = 1
    # A system prompt every request starts with, one of ``system_prompts`` (chosen at random
    # per conversation): the shared prefix a prefix-aware router exploits.
    system_prompt_tokens: int = 0
    system_prompts: int = 1
    # Turns per conversation: turn k's prompt is the system prompt, every earlier turn's user
    # message and answer, and its own message; it is sent ``think_time`` seconds after turn
    # k-1's answer ended.
    turns: int = 1
    think_time: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rate <= 0 or not math.isfinite(self.rate):
            raise ValueError(f"rate must be > 0, got {self.rate}")
        if self.duration < 0:
            raise ValueError(f"duration must be >= 0, got {self.duration}")
        checks = {
            "prompt_tokens": self.prompt_tokens >= 0,
            "output_tokens": self.output_tokens >= 0,
            "burst_size": self.burst_size >= 1,
            "system_prompt_tokens": self.system_prompt_tokens >= 0,
            "system_prompts": self.system_prompts >= 1,
            "turns": self.turns >= 1,
            "think_time": self.think_time >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"{name} is out of range: {getattr(self, name)}")
        if self.arrivals not in ARRIVAL_PATTERNS:
            raise ValueError(f"arrivals must be one of {', '.join(ARRIVAL_PATTERNS)}, got '{self.arrivals}'")

    @property
    def max_prompt_tokens(self) -> int:
        """The longest prompt the shape makes (the last turn of a conversation)."""
        return self.system_prompt_tokens + self.turns * self.prompt_tokens + (self.turns - 1) * self.output_tokens

    def with_rate(self, rate: float) -> WorkloadShape:
        return WorkloadShape(
            rate,
            self.duration,
            self.prompt_tokens,
            self.output_tokens,
            self.arrivals,
            self.burst_size,
            self.system_prompt_tokens,
            self.system_prompts,
            self.turns,
            self.think_time,
            self.seed,
        )


def arrival_times(shape: WorkloadShape) -> list[float]:
    """Start times of the shape's conversations (of its requests when ``turns`` is 1)."""
    if shape.arrivals == "poisson":
        return poisson_arrivals(shape.rate, shape.duration, shape.seed)
    if shape.arrivals == "constant":
        return [k / shape.rate for k in range(math.ceil(shape.duration * shape.rate))]
    gap = shape.burst_size / shape.rate
    times: list[float] = []
    for k in range(math.ceil(shape.duration / gap)):
        times.extend([k * gap] * shape.burst_size)
    return times


def generate(shape: WorkloadShape) -> FleetWorkload:
    """The requests of ``shape``, conversation by conversation (each turn after the one it follows)."""
    # A separate stream for the system prompt choice, so adding system prompts keeps the arrivals.
    pick = random.Random(f"llmsim-fleet-system-prompt/{shape.seed}")
    requests: list[FleetRequest] = []
    for c, start in enumerate(arrival_times(shape)):
        history: list[Segment] = []
        if shape.system_prompt_tokens:
            group = pick.randrange(shape.system_prompts)
            history.append(Segment(f"system:{group}", shape.system_prompt_tokens))
        previous: int | None = None
        for turn in range(shape.turns):
            history.append(Segment(f"user:{c}.{turn}", shape.prompt_tokens))
            prompt = Prompt(tuple(history))
            # The answer is quoted by the next turn (the last turn's by nobody).
            answer = Segment(f"answer:{c}.{turn}", shape.output_tokens) if turn + 1 < shape.turns else None
            if previous is None:
                requests.append(FleetRequest(prompt, shape.output_tokens, start, answer=answer))
            else:
                requests.append(
                    FleetRequest(prompt, shape.output_tokens, shape.think_time, follows=previous, answer=answer)
                )
            previous = len(requests) - 1
            if answer is not None:
                history.append(answer)
    return FleetWorkload(tuple(requests))


def _text(request: FleetRequest) -> tuple[Segment, ...]:
    """The segments whose blocks ``request`` computes: its prompt's, then its answer's if quoted."""
    segments = request.prompt.segments
    return segments if request.answer is None else (*segments, request.answer)
