"""What one streamed completion says: its SSE bytes, one token at a time, and what it says at the end.

Lag (the simulator's error bar) is defined here, once: the time a token's chunk is made, right
before it is written, minus the token's simulated deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llmsim.api.completion_bodies import DONE, ChunkTemplates
from llmsim.engine.errors import EngineStopped
from llmsim.types import FinishReason, GenerationPlan, TokenEvent


class CompletionStream:
    """Chunks for the ``n`` choices of one request, as OpenAI/vLLM stream them.

    Per token: the role chunk before a choice's first token (chat), the token chunk (with the
    finish reason on the last one, usage so far with ``continuous_usage_stats``). At the end:
    a finish chunk for a choice that produced no token, the ``include_usage`` chunk, ``[DONE]``.
    Release lags are kept and handed to ``observe_lags`` once, in :meth:`close`.
    """

    __slots__ = (
        "_cached_tokens",
        "_chat",
        "_chunks",
        "_completion_tokens",
        "_continuous",
        "_done",
        "_finish",
        "_include_usage",
        "_lags",
        "_last",
        "_now",
        "_observe_lags",
        "_plans",
        "_prompt_of",
        "_prompt_tokens",
        "_started",
    )

    def __init__(
        self,
        chunks: ChunkTemplates,
        plans: Sequence[GenerationPlan],
        *,
        chat: bool,
        prompt_tokens: int,
        continuous_usage: bool,
        include_usage: bool,
        now: Callable[[], float],
        observe_lags: Callable[[Sequence[float]], None],
        cached_tokens: Callable[[], int] | None = None,
    ) -> None:
        self._chunks = chunks
        # Read when the usage chunk is written (the engine knows the hit once the prefill ran).
        self._cached_tokens = cached_tokens
        self._plans = plans
        self._chat = chat
        self._prompt_tokens = prompt_tokens
        self._continuous = continuous_usage
        self._include_usage = include_usage
        self._now = now
        self._observe_lags = observe_lags
        self._last = [p.num_output_tokens - 1 for p in plans]
        self._finish = [p.finish_reason for p in plans]
        self._prompt_of = [p.prompt_tokens for p in plans]
        self._started = [False] * len(plans)
        self._done = [False] * len(plans)
        self._completion_tokens = 0
        self._lags: list[float] = []

    def merged(self, item: tuple[int, TokenEvent]) -> bytes:
        """The chunk of a token of choice ``item[0]`` (``n > 1``: events from ``merged_events``)."""
        return self.token(item[0], item[1])

    def token(self, pos: int, event: TokenEvent) -> bytes:
        """The chunk of a token of choice ``pos`` (with the role chunk before a choice's first)."""
        # Per-token path: byte templates only; the lag is taken as the chunk is made, just before it is written.
        self._lags.append(self._now() - event.sim_time)
        self._completion_tokens += 1
        head = b""
        if self._chat and not self._started[pos]:
            self._started[pos] = True
            head = self._chunks.role(pos)
        finish: FinishReason | None = None
        if event.index == self._last[pos]:
            finish = self._finish[pos]
            self._done[pos] = True
        usage = (self._prompt_of[pos], event.index + 1) if self._continuous else None
        return head + self._chunks.token(pos, event.text, finish, usage)

    def tail(self) -> bytes:
        """Everything after the last token: finish chunks of empty choices, usage, ``[DONE]``."""
        parts: list[bytes] = []
        for pos, plan in enumerate(self._plans):
            if not self._done[pos]:  # a choice with no tokens still gets its finish reason
                if self._chat and not self._started[pos]:
                    parts.append(self._chunks.role(pos))
                usage = (plan.prompt_tokens, 0) if self._continuous else None
                parts.append(self._chunks.finish(pos, plan.finish_reason, usage))
        if self._include_usage:
            cached = self._cached_tokens() if self._cached_tokens is not None else None
            parts.append(self._chunks.usage(self._prompt_tokens, self._completion_tokens, cached))
        parts.append(DONE)
        return b"".join(parts)

    def error(self, exc: Exception) -> bytes | None:
        """The stream's last bytes after ``exc``, or None if it is not one a stream reports."""
        if not isinstance(exc, EngineStopped):
            return None
        # Headers are sent: like vLLM, report the error as an event; the stream still ends with [DONE].
        return self._chunks.error(str(exc), "InternalServerError", 500) + DONE

    def close(self) -> None:
        """Once, however the stream ended: hand over the release lags."""
        lags, self._lags = self._lags, []
        self._observe_lags(lags)
