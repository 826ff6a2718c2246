"""Per-request state the scheduler moves between its queues (vLLM's ``Request``).

Token layout of one sequence (P prompt tokens, k outputs released so far)::

    | prompt (P)                        | out_1 ... out_k |
    |<------ num_computed_tokens ------>|                 |   KV written so far
    |<---------------- num_tokens = P + k --------------->|

A step computes the next ``num_tokens - num_computed_tokens`` tokens (or a chunk of them); when
it catches up, a new token is sampled and released, so ``num_tokens`` grows by one. The last
released token's KV is only ever written by the following step, so a sequence never holds KV
for more than ``P + max_output_tokens - 1`` tokens.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from llmsim.types import FinishReason, RequestId, RequestStats


class SequenceStatus(enum.IntEnum):
    """Ordered so that "finished" is one comparison: ``status >= FINISHED``."""

    WAITING = 0
    PREEMPTED = 1
    RUNNING = 2
    FINISHED = 3
    ABORTED = 4
    # Refused at arrival (the waiting queue was full): never scheduled, never reported.
    REJECTED = 5


@dataclass(slots=True, eq=False)
class Sequence:
    """One request's scheduling state; compared by identity (request ids may repeat across choices)."""

    request_id: RequestId
    # Stamp on the engine's timeline; a step starting at or after it may schedule the sequence.
    arrival: float
    # As reported in stats (may be 0); scheduling uses num_prompt_tokens.
    prompt_tokens: int
    # Planned output length: used only to stop the sequence, like an end-of-sequence token.
    max_output_tokens: int
    # Reason reported when all planned tokens are out.
    finish_reason: FinishReason = FinishReason.STOP
    # Prompt length as scheduled: at least one token (vLLM always has one, e.g. BOS).
    num_prompt_tokens: int = field(init=False, default=0)
    # Tokens whose KV has been (or is being, in the step in flight) computed.
    num_computed_tokens: int = 0
    # Output tokens released so far.
    num_output_tokens: int = 0
    # KV block ids held, in token order.
    blocks: list[int] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    num_preemptions: int = 0
    # Simulated times: start of the first step that scheduled it, first release, end (or abort).
    scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    # Release time of every output token, in order.
    token_times: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.prompt_tokens < 0 or self.max_output_tokens < 0:
            raise ValueError("prompt_tokens and max_output_tokens must be >= 0")
        self.num_prompt_tokens = max(1, self.prompt_tokens)

    @property
    def num_tokens(self) -> int:
        """Prompt plus released outputs: what a (re)computation must cover before the next token."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def is_finished(self) -> bool:
        return self.status >= SequenceStatus.FINISHED

    def limit_to_context(self, context_length: int) -> None:
        """Stop at the context length (vLLM's max_model_len check) with finish reason ``length``."""
        if self.num_prompt_tokens > context_length:
            raise ValueError(
                f"prompt of {self.num_prompt_tokens} tokens exceeds the context length of {context_length}"
            )
        room = context_length - self.num_prompt_tokens
        if self.max_output_tokens > room:
            self.max_output_tokens = room
            self.finish_reason = FinishReason.LENGTH

    def to_stats(self) -> RequestStats:
        """The engine-neutral record observers receive once the sequence has ended."""
        assert self.finished_time is not None, "only a finished or aborted sequence has stats"
        return RequestStats(
            request_id=self.request_id,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.num_output_tokens,
            finish_reason=FinishReason.ABORT if self.status >= SequenceStatus.ABORTED else self.finish_reason,
            arrival=self.arrival,
            scheduled=self.scheduled_time,
            first_token=self.first_token_time,
            finished=self.finished_time,
            num_preemptions=self.num_preemptions,
            token_times=self.token_times,
        )
