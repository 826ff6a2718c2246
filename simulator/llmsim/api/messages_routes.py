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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmsim.api.chat_served import ChatRun, plan_chat, run_streamed, run_whole
from llmsim.api.completion_bodies import completion_body, dumps_compact, finish_reason
from llmsim.api.errors import APIError, from_validation_error
from llmsim.api.protocol import ChatCompletionRequest, RequestInvalid
from llmsim.api.routes import _arrival, _off_loop, _served, _state, _tool_call_id, bad_request, parse_body
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


class MessagesTool(_Lenient):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]


class MessagesToolChoice(_Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None

    @model_validator(mode="after")
    def _named(self) -> MessagesToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice.name is required when type is 'tool'")
        return self


#: Anthropic's tool_choice as the chat request's (vLLM's conversion).
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


class MessagesCountTokensRequest(_Lenient):
    """vLLM's AnthropicCountTokensRequest: a conversation, its system prompt and tools."""

    model: str
    messages: list[MessagesMessage]
    system: str | list[MessagesContentBlock] | None = None
    tools: list[MessagesTool] | None = None
    tool_choice: MessagesToolChoice | None = None

    @field_validator("model")
    @classmethod
    def _model_named(cls, v: str) -> str:
        if not v:
            raise ValueError("Model is required")
        return v

    def _sampling(self) -> dict[str, Any]:
        return {}

    def to_chat(self) -> ChatCompletionRequest:
        """The chat request vLLM serves this as (its ``_convert_anthropic_to_openai_request``)."""
        data: dict[str, Any] = {"model": self.model, "messages": self.chat_messages(), **self._sampling()}
        choice = self.tool_choice
        if choice is not None:
            named = {"type": "function", "function": {"name": choice.name}}
            data["tool_choice"] = named if choice.type == "tool" else _TOOL_CHOICES[choice.type]
        if self.tools is not None:
            data["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                }
                for t in self.tools
            ]
            data.setdefault("tool_choice", "auto")
        try:
            return ChatCompletionRequest.model_validate(data)
        except ValidationError as exc:
            raise from_validation_error(exc) from None
        except RequestInvalid as exc:
            raise bad_request(exc) from None

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
            calls: list[dict[str, Any]] = []
            for block in m.content:
                if block.type == "text" and block.text:
                    texts.append(block.text)
                elif block.type == "tool_use":
                    function = {"name": block.name or "", "arguments": json.dumps(block.input or {})}
                    calls.append({"id": block.id or "", "type": "function", "function": function})
                elif block.type == "tool_result" and m.role == "user":
                    out.append(
                        {"role": "tool", "tool_call_id": block.tool_use_id or "", "content": _result_text(block)}
                    )
            if calls:
                out.append({"role": m.role, "content": "".join(texts), "tool_calls": calls})
            elif texts or m.role == "assistant":
                out.append({"role": m.role, "content": "".join(texts)})
        return out


class MessagesRequest(MessagesCountTokensRequest):
    """vLLM's AnthropicMessagesRequest (the fields llmsim reads; others are accepted and ignored)."""

    # Required, as Anthropic and vLLM require it.
    max_tokens: int
    stop_sequences: list[str] | None = None
    stream: bool | None = False
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None

    def _sampling(self) -> dict[str, Any]:
        return {
            "max_tokens": self.max_tokens,
            "stop": self.stop_sequences,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "stream": bool(self.stream),
        }

    @field_validator("max_tokens")
    @classmethod
    def _max_tokens_positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("max_tokens must be positive")
        return v


def _result_text(block: MessagesContentBlock) -> str:
    if isinstance(block.content, str):
        return block.content
    return "\n".join(str(item.get("text", "")) for item in block.content or () if item.get("type") == "text")


def error_body(exc: APIError) -> dict[str, Any]:
    """vLLM's translation of its error response: Anthropic's shape, vLLM's error type."""
    return {"type": "error", "error": {"type": exc.err_type, "message": exc.message}}


def _error_response(exc: APIError) -> Response:
    return JSONResponse(error_body(exc), status_code=exc.status, headers=exc.headers)


def _stop_reason(plan: GenerationPlan, said: int, *, named_tool: bool) -> str | None:
    if said < plan.num_output_tokens:
        return None  # aborted: vLLM's "abort" has no Messages stop reason
    return STOP_REASONS.get(finish_reason(plan, named_tool=named_tool))


async def messages(request: Request) -> Response:
    """Anthropic's ``POST /v1/messages``: a chat completion said the Messages way."""
    state = _state(request)
    arrival = _arrival(request, state)
    body = await parse_body(request, MessagesRequest)
    try:
        return await _serve(request, body, arrival)
    except APIError as exc:
        return _error_response(exc)


async def count_tokens(request: Request) -> Response:
    """vLLM's ``POST /v1/messages/count_tokens``: the prompt tokens the conversation would take (its usage.input_tokens)."""
    state = _state(request)
    body = await parse_body(request, MessagesCountTokensRequest)
    try:
        chat = body.to_chat()
        served = _served(state, chat.model)
        try:
            gen_request = chat.to_generation_request()
        except ValueError as exc:
            raise APIError(400, str(exc), param="messages") from None
        ids = await _off_loop(request, served.generator.prompt_token_ids, gen_request)
    except APIError as exc:
        return _error_response(exc)
    return JSONResponse({"input_tokens": len(ids)})


async def _serve(request: Request, body: MessagesRequest, arrival: float) -> Response:
    chat = body.to_chat()
    run = await plan_chat(request, chat, arrival, "chatcmpl-")
    if isinstance(run, Response):
        return run
    named_tool = chat.named_tool is not None
    call_ids = [_tool_call_id() for _ in run.plan.tool_calls]
    if body.stream:
        return await run_streamed(run, lambda _cached: MessagesStream(run, call_ids, named_tool=named_tool))
    done = await run_whole(run)
    if isinstance(done, Response):
        return done
    tokens, _cached = done
    return JSONResponse(message_body(run, tokens, call_ids, named_tool=named_tool))


def message_body(run: ChatRun, tokens: list[str], call_ids: list[str], *, named_tool: bool) -> dict[str, Any]:
    """The whole message: the chat completion's body, converted as vLLM converts it."""
    plan = run.plan
    chat = completion_body(
        run.request_id,
        int(time.time()),
        run.model,
        [plan],
        [tokens],
        run.prompt_tokens,
        chat=True,
        named_tool=named_tool,
        tool_call_ids=[call_ids],
    )
    message = chat["choices"][0]["message"]
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        function = call["function"]
        content.append(
            {"type": "tool_use", "id": call["id"], "name": function["name"], "input": json.loads(function["arguments"])}
        )
    return {
        "id": run.request_id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": run.model,
        "stop_reason": _stop_reason(plan, len(tokens), named_tool=named_tool),
        "stop_sequence": None,
        "usage": {"input_tokens": run.prompt_tokens, "output_tokens": len(tokens)},
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumps_compact(data) + b"\n\n"


class MessagesStream:
    """The SSE events of a streamed message, as vLLM converts its chat stream.

    ``message_start`` with the first token; a text block opened by the first non-empty text
    token, a ``tool_use`` block by each tool call's first delta (its name), each block closed by
    ``content_block_stop`` when the next opens; one ``content_block_delta`` per token that says
    something (``text_delta``, or ``input_json_delta`` with a piece of the call's arguments);
    then ``message_delta`` (stop reason, usage) and ``message_stop``.
    """

    def __init__(self, run: ChatRun, call_ids: list[str], *, named_tool: bool) -> None:
        self._run = run
        self._plan = run.plan
        self._call_ids = call_ids
        self._named_tool = named_tool
        self._started = False
        self._block: str | None = None
        self._index = -1
        self._sent = 0
        self._lags: list[float] = []

    def head(self) -> bytes:
        # As vLLM: message_start comes with the first token (its chat stream's first chunk).
        return b""

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        run = self._run
        message: dict[str, Any] = {
            "id": run.request_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": run.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": run.prompt_tokens, "output_tokens": 0},
        }
        return _event("message_start", {"type": "message_start", "message": message})

    def _close(self) -> bytes:
        if self._block is None:
            return b""
        self._block = None
        return _event("content_block_stop", {"type": "content_block_stop", "index": self._index})

    def _open(self, kind: str, block: dict[str, Any]) -> bytes:
        out = self._close()
        self._block = kind
        self._index += 1
        return out + _event(
            "content_block_start", {"type": "content_block_start", "index": self._index, "content_block": block}
        )

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta})

    def encode(self, event: TokenEvent) -> bytes:
        self._lags.append(self._run.now() - event.sim_time)
        self._sent += 1
        out = self._start()
        plan = self._plan
        if plan.tool_calls:
            tool = plan.tool_deltas[event.index]
            if tool is None:
                return out  # a token of the call's wrapper: the tool-call parser says nothing for it
            if tool.name is not None:
                block = {"type": "tool_use", "id": self._call_ids[tool.index], "name": tool.name, "input": {}}
                out += self._open("tool_use", block)
            if tool.arguments:
                out += self._delta({"type": "input_json_delta", "partial_json": tool.arguments})
            return out
        if not event.text:
            return out
        if self._block != "text":
            out += self._open("text", {"type": "text", "text": ""})
        return out + self._delta({"type": "text_delta", "text": event.text})

    def tail(self) -> bytes:
        out = self._start() + self._close()
        stop_reason = _stop_reason(self._plan, self._sent, named_tool=self._named_tool)
        usage = {"input_tokens": self._run.prompt_tokens, "output_tokens": self._sent}
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
        self._run.served.observe_lags(lags)
