"""Anthropic's Messages API (``POST /v1/messages``) as vLLM serves it.

As vLLM (``vllm/entrypoints/anthropic/``), a Messages request is converted to the chat request it
means and served by the chat path: the same generator, faults, engine timeline and metrics as
``/v1/chat/completions``; the answer is then said the Messages way. Errors past the body's
validation are answered in Anthropic's shape (``{"type": "error", "error": {"type", "message"}}``),
with vLLM's error types; a body that does not validate gets vLLM's own 400, as its FastAPI layer
answers before the handler runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmsim.api.chat_served import plan_chat, run_streamed, run_whole
from llmsim.api.completion_bodies import completion_body, dumps_compact
from llmsim.api.errors import APIError, from_validation_error
from llmsim.api.protocol import ChatCompletionRequest, RequestInvalid
from llmsim.api.routes import _arrival, _state, bad_request, parse_body
from llmsim.api.served import ServedModel
from llmsim.engine.errors import EngineStopped, RequestAborted
from llmsim.types import GenerationPlan, TokenEvent

#: vLLM's map from the chat finish reason to the Messages stop reason (others: null).
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class MessagesContentBlock(_Lenient):
    """A content block; only its text is read (``text`` blocks, and a ``tool_result``'s content)."""

    type: Literal["text", "image", "tool_use", "tool_result", "tool_reference", "thinking", "redacted_thinking"]
    text: str | None = None
    id: str | None = None
    tool_use_id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    content: str | list[dict[str, Any]] | None = None


class MessagesMessage(_Lenient):
    role: Literal["user", "assistant", "system"]
    content: str | list[MessagesContentBlock]


class MessagesRequest(_Lenient):
    """vLLM's AnthropicMessagesRequest (the fields llmsim reads; others are accepted and ignored)."""

    model: str
    messages: list[MessagesMessage]
    # Required, as Anthropic and vLLM require it.
    max_tokens: int
    stop_sequences: list[str] | None = None
    stream: bool | None = False
    system: str | list[MessagesContentBlock] | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None

    @field_validator("model")
    @classmethod
    def _model_named(cls, v: str) -> str:
        if not v:
            raise ValueError("Model is required")
        return v

    @field_validator("max_tokens")
    @classmethod
    def _max_tokens_positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("max_tokens must be positive")
        return v

    def chat_messages(self) -> list[dict[str, Any]]:
        """The chat messages vLLM converts these to: one system message first (the system texts joined), then the rest."""
        system: list[str] = []
        if isinstance(self.system, str):
            system.append(self.system)
        elif self.system:
            system += [b.text for b in self.system if b.type == "text" and b.text]
        for m in self.messages:
            if m.role == "system":
                system += [m.content] if isinstance(m.content, str) else [b.text for b in m.content if b.text]
        out: list[dict[str, Any]] = [{"role": "system", "content": "".join(system)}] if system else []
        for m in self.messages:
            if m.role == "system":
                continue
            if isinstance(m.content, str):
                out.append({"role": m.role, "content": m.content})
                continue
            texts: list[str] = []
            for block in m.content:
                if block.type == "text" and block.text:
                    texts.append(block.text)
                elif block.type == "tool_result" and m.role == "user":
                    out.append(
                        {"role": "tool", "tool_call_id": block.tool_use_id or "", "content": _result_text(block)}
                    )
            if texts or m.role == "assistant":
                out.append({"role": m.role, "content": "".join(texts)})
        return out

    def to_chat(self) -> ChatCompletionRequest:
        """The chat request vLLM serves this as (its ``_convert_anthropic_to_openai_request``)."""
        data: dict[str, Any] = {
            "model": self.model,
            "messages": self.chat_messages(),
            "max_tokens": self.max_tokens,
            "stop": self.stop_sequences,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "stream": bool(self.stream),
        }
        try:
            return ChatCompletionRequest.model_validate(data)
        except ValidationError as exc:
            raise from_validation_error(exc) from None
        except RequestInvalid as exc:
            raise bad_request(exc) from None


def _result_text(block: MessagesContentBlock) -> str:
    if isinstance(block.content, str):
        return block.content
    return "\n".join(str(item.get("text", "")) for item in block.content or () if item.get("type") == "text")


def error_body(exc: APIError) -> dict[str, Any]:
    """vLLM's translation of its error response: Anthropic's shape, vLLM's error type."""
    return {"type": "error", "error": {"type": exc.err_type, "message": exc.message}}


def _error_response(exc: APIError) -> Response:
    return JSONResponse(error_body(exc), status_code=exc.status, headers=exc.headers)


def _stop_reason(plan: GenerationPlan, said: int) -> str | None:
    if said < plan.num_output_tokens:
        return None  # aborted: vLLM's "abort" has no Messages stop reason
    return STOP_REASONS.get(plan.finish_reason.value)


async def messages(request: Request) -> Response:
    """Anthropic's ``POST /v1/messages``: a chat completion said the Messages way."""
    state = _state(request)
    arrival = _arrival(request, state)
    body = await parse_body(request, MessagesRequest)
    try:
        return await _serve(request, body, arrival)
    except APIError as exc:
        return _error_response(exc)


async def _serve(request: Request, body: MessagesRequest, arrival: float) -> Response:
    run = await plan_chat(request, body.to_chat(), arrival, "chatcmpl-")
    if isinstance(run, Response):
        return run
    if body.stream:
        return await run_streamed(
            run,
            lambda _cached: MessagesStream(run.request_id, run.model, run.plan, run.prompt_tokens, run.served, run.now),
        )
    done = await run_whole(run)
    if isinstance(done, Response):
        return done
    tokens, _cached = done
    return JSONResponse(message_body(run.request_id, run.model, run.plan, tokens, run.prompt_tokens))


def message_body(
    request_id: str, model: str, plan: GenerationPlan, tokens: list[str], prompt_tokens: int
) -> dict[str, Any]:
    """The whole message: the chat completion's body, converted as vLLM converts it."""
    chat = completion_body(request_id, int(time.time()), model, [plan], [tokens], prompt_tokens, chat=True)
    message = chat["choices"][0]["message"]
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        function = call["function"]
        content.append(
            {"type": "tool_use", "id": call["id"], "name": function["name"], "input": json.loads(function["arguments"])}
        )
    finish = chat["choices"][0]["finish_reason"]
    return {
        "id": request_id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": model,
        "stop_reason": STOP_REASONS.get(finish) if len(tokens) == plan.num_output_tokens else None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": len(tokens)},
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumps_compact(data) + b"\n\n"


class MessagesStream:
    """The SSE events of a streamed message, as vLLM converts its chat stream.

    ``message_start`` with the first token, a text block opened by the first non-empty token, one
    ``content_block_delta`` per token, then ``content_block_stop``, ``message_delta`` (stop
    reason, usage) and ``message_stop``.
    """

    def __init__(
        self,
        request_id: str,
        model: str,
        plan: GenerationPlan,
        prompt_tokens: int,
        served: ServedModel,
        now: Callable[[], float],
    ) -> None:
        self._request_id = request_id
        self._model = model
        self._plan = plan
        self._prompt_tokens = prompt_tokens
        self._served = served
        self._now = now
        self._started = False
        self._block_open = False
        self._sent = 0
        self._lags: list[float] = []

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        message: dict[str, Any] = {
            "id": self._request_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self._model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self._prompt_tokens, "output_tokens": 0},
        }
        return _event("message_start", {"type": "message_start", "message": message})

    def encode(self, event: TokenEvent) -> bytes:
        self._lags.append(self._now() - event.sim_time)
        self._sent += 1
        out = self._start()
        if not event.text:
            return out
        if not self._block_open:
            self._block_open = True
            start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            out += _event("content_block_start", start)
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": event.text}}
        return out + _event("content_block_delta", delta)

    def tail(self) -> bytes:
        out = self._start()
        if self._block_open:
            out += _event("content_block_stop", {"type": "content_block_stop", "index": 0})
        stop_reason = _stop_reason(self._plan, self._sent)
        usage = {"input_tokens": self._prompt_tokens, "output_tokens": self._sent}
        out += _event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": usage})
        return out + _event("message_stop", {"type": "message_stop"})

    def error(self, exc: Exception) -> bytes | None:
        if isinstance(exc, RequestAborted):
            return self.tail()
        if not isinstance(exc, EngineStopped):
            return None
        return _event("error", {"type": "error", "error": {"type": "internal_error", "message": str(exc)}})

    def close(self) -> None:
        lags, self._lags = self._lags, []
        self._served.observe_lags(lags)
