"""What one streamed completion says: its SSE bytes, one token at a time, and what it says at the end.

Lag (the simulator's error bar) is defined here, once: the time a token's chunk is written (taken
right before the write, whether the chunk was made then or ahead of the release) minus the token's
simulated deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llmsim.api.completion_bodies import (
    DONE,
    ChunkTemplates,
    Echo,
    chat_logprobs_entry,
    completion_logprobs,
    dumps_compact,
    finish_reason,
    tool_call_delta_json,
)
from llmsim.engine.errors import EngineStopped, RequestAborted, RequestFailed
from llmsim.types import FinishReason, GenerationPlan, TokenEvent

#: Release lags kept per stream before they are handed to the metrics in one call.
LAG_BATCH = 1024


class CompletionStream:
    """Chunks for the ``n`` choices of one request, as OpenAI/vLLM stream them.

    Per token: the role chunk before a choice's first token (chat), the token chunk (with the
    finish reason on the last one, usage so far with ``continuous_usage_stats``). At the end:
    a finish chunk for a choice that produced no token, the ``include_usage`` chunk, ``[DONE]``.
    Release lags are handed to ``observe_lags`` in batches of :data:`LAG_BATCH` and at :meth:`close`.

    :meth:`token` is the byte-template path of almost every request; a request that asks for
    logprobs or echo, or whose answer is tool calls, is encoded by :meth:`rich_token` instead
    (:attr:`encode` is the one that applies).
    """

    __slots__ = (
        "_cached_tokens",
        "_chat",
        "_chunks",
        "_completion_tokens",
        "_continuous",
        "_done",
        "_echo",
        "_echoed",
        "_finish",
        "_finish_text",
        "_include_usage",
        "_lags",
        "_last",
        "_logprobs",
        "_now",
        "_observe_lags",
        "_offsets",
        "_plans",
        "_prompt_of",
        "_prompt_tokens",
        "_rich",
        "_started",
        "_tool_call_ids",
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
        logprobs: int | None = None,
        echo: Sequence[Echo] | None = None,
        named_tool: bool = False,
        tool_call_ids: Sequence[Sequence[str]] = (),
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
        self._logprobs = logprobs
        self._echo = echo
        self._echoed = [False] * len(plans)
        # Completions with logprobs: each choice's text length so far (vLLM's text_offset base).
        self._offsets = [0] * len(plans)
        self._finish_text = [finish_reason(p, named_tool=named_tool) for p in plans]
        self._tool_call_ids = tool_call_ids
        self._rich = logprobs is not None or echo is not None or any(p.tool_calls for p in plans)

    @property
    def encode(self) -> Callable[[int, TokenEvent], bytes]:
        """The encoder of one token of choice ``pos``: ``encode(pos, event)``.

        Bound on each read, never stored on the instance: a stored bound method would make every
        stream a reference cycle, freed only by the garbage collector (in bulk, in a pause that
        delays a step's release) instead of when its request ends.
        """
        return self.rich_token if self._rich else self.token

    @property
    def templated(self) -> bool:
        """Whether every token's chunk is a template fill (:meth:`chunk`), as for almost every request."""
        return not self._rich

    def _note_lag(self, event: TokenEvent) -> None:
        """The token's lag, taken as its chunk is made, just before it is written."""
        lags = self._lags
        lags.append(self._now() - event.sim_time)
        if len(lags) >= LAG_BATCH:
            # Handed over in batches, so a long stream holds a bounded list, not one float per token.
            self._observe_lags(lags)
            self._lags = []

    def merged(self, item: tuple[int, TokenEvent]) -> bytes:
        """The chunk of a token of choice ``item[0]`` (``n > 1``: events from ``merged_events``)."""
        return self.encode(item[0], item[1])

    def token(self, pos: int, event: TokenEvent) -> bytes:
        """The chunk of a token of choice ``pos`` (with the role chunk before a choice's first).

        :meth:`chunk` then :meth:`count`, written out in one call: the pulled path's per-token
        work (the fixed engine's every token) pays no extra call for the split.
        """
        # Per-token path: byte templates only.
        self._note_lag(event)
        self._completion_tokens += 1
        chunks = self._chunks
        head = b""
        if self._chat and not self._started[pos]:
            head = chunks.role(pos)
        self._started[pos] = True
        finish: FinishReason | None = None
        if event.index == self._last[pos]:
            finish = self._finish[pos]
            self._done[pos] = True
        usage = (self._prompt_of[pos], event.index + 1) if self._continuous else None
        return head + chunks.token(pos, event.text, finish, usage)

    def chunk(self, pos: int, event: TokenEvent) -> bytes:
        """The bytes :meth:`token` writes for ``event``, changing nothing (the templated path only).

        So they can be made ahead of the token's release (which may then never come: the stream
        can end first); :meth:`count` then says the token was written. They depend on what was
        written before only through whether the choice has started: an engine shows a token ahead
        only when every earlier one of its stream has been handed over (and so encoded).
        """
        # Per-token path: byte templates only.
        chunks = self._chunks
        head = chunks.role(pos) if self._chat and not self._started[pos] else b""
        finish = self._finish[pos] if event.index == self._last[pos] else None
        usage = (self._prompt_of[pos], event.index + 1) if self._continuous else None
        return head + chunks.token(pos, event.text, finish, usage)

    def count(self, pos: int, event: TokenEvent) -> None:
        """What :meth:`token` records besides its bytes, as ``event``'s chunk is written: its lag,
        one more completion token, the choice started (and finished on its last token)."""
        # Per-token path, at the token's release.
        lags = self._lags
        lags.append(self._now() - event.sim_time)
        if len(lags) >= LAG_BATCH:
            self._observe_lags(lags)
            self._lags = []
        self._completion_tokens += 1
        self._started[pos] = True
        if event.index == self._last[pos]:
            self._done[pos] = True

    def rich_token(self, pos: int, event: TokenEvent) -> bytes:
        """The chunk of a token of a request that asked for logprobs or echo, or whose answer is tool calls."""
        self._note_lag(event)
        self._completion_tokens += 1
        head = b""
        if self._chat and not self._started[pos]:
            self._started[pos] = True
            head = self._chunks.role(pos)
        last = event.index == self._last[pos]
        if last:
            self._done[pos] = True
        usage = (self._prompt_of[pos], event.index + 1) if self._continuous else None
        choice = self._choice(pos, event, last)
        if choice is None:
            return head
        return head + self._chunks.choice(dumps_compact(choice), usage)

    def _choice(self, pos: int, event: TokenEvent | None, last: bool) -> dict[str, Any] | None:
        """One choice of a rich chunk: ``event``'s token, or (None) the closing of a choice with no token."""
        plan = self._plans[pos]
        k = self._logprobs
        finish = self._finish_text[pos] if last else None
        if self._chat:
            delta: dict[str, Any] = {}
            if event is not None and plan.tool_calls:
                tool = plan.tool_deltas[event.index]
                if tool is None and not last:
                    return None  # a token of the call's wrapper: a tool-call parser says nothing for it
                if tool is not None:
                    delta = {"tool_calls": [tool_call_delta_json(tool, self._tool_call_ids[pos][tool.index])]}
            elif event is not None:
                delta = {"content": event.text}
            lp = None
            if k is not None and event is not None:
                lp = {"content": [chat_logprobs_entry(event.text, event.index, k)]}
            return {"index": pos, "delta": delta, "logprobs": lp, "finish_reason": finish}
        output = [event.text] if event is not None else []
        text = "".join(output)
        prompt: tuple[str, ...] = ()
        if self._echo is not None and not self._echoed[pos]:
            # The first chunk of a choice says the prompt back, then its first token (vLLM).
            self._echoed[pos] = True
            prompt = self._echo[pos].tokens
            text = self._echo[pos].text + text
        clp = None
        if k is not None:
            first = event.index if event is not None else 0
            clp = completion_logprobs(output, k, prompt=prompt, first_position=first, text_offset=self._offsets[pos])
            self._offsets[pos] += len(text)
        return {"index": pos, "text": text, "logprobs": clp, "finish_reason": finish}

    def tail(self, aborted: bool = False) -> bytes:
        """Everything after the last token: finish chunks of unfinished choices, usage, ``[DONE]``.

        A choice with no tokens still gets its finish reason; ``aborted`` (the engine cut the
        request short) ends every unfinished choice with ``abort``, as vLLM does.
        """
        parts: list[bytes] = []
        for pos, plan in enumerate(self._plans):
            if not self._done[pos]:
                if self._chat and not self._started[pos]:
                    parts.append(self._chunks.role(pos))
                usage = (plan.prompt_tokens, 0) if self._continuous else None
                if not self._rich:
                    parts.append(self._chunks.finish(pos, FinishReason.ABORT if aborted else plan.finish_reason, usage))
                else:
                    if aborted:
                        self._finish_text[pos] = FinishReason.ABORT.value
                    closing = self._choice(pos, None, True)
                    assert closing is not None
                    parts.append(self._chunks.choice(dumps_compact(closing), usage))
        if self._include_usage:
            cached = self._cached_tokens() if self._cached_tokens is not None else None
            parts.append(self._chunks.usage(self._prompt_tokens, self._completion_tokens, cached))
        parts.append(DONE)
        return b"".join(parts)

    def error(self, exc: Exception) -> bytes | None:
        """The stream's last bytes after ``exc``, or None if it is not one a stream reports."""
        if isinstance(exc, RequestAborted):
            return self.tail(aborted=True)
        if isinstance(exc, RequestFailed):
            # vLLM's GenerationError (finish reason "error"), as an event once headers are sent.
            return self._chunks.error("Internal server error", "InternalServerError", 500) + DONE
        if not isinstance(exc, EngineStopped):
            return None
        # Headers are sent: like vLLM, report the error as an event; the stream still ends with [DONE].
        return self._chunks.error(str(exc), "InternalServerError", 500) + DONE

    def close(self) -> None:
        """Once, however the stream ended: hand over the release lags."""
        lags, self._lags = self._lags, []
        self._observe_lags(lags)
