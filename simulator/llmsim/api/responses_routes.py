"""OpenAI's Responses API (``POST /v1/responses``) as vLLM serves it: text and function calls.

The request is served as the chat request it means (chat_served.py): the same generator, faults,
engine timeline and metrics as ``/v1/chat/completions``. ``previous_response_id`` continues a
conversation this process stored (a bounded store, api/response_store.py); ``instructions`` are
not carried over, as OpenAI specifies. Errors are vLLM's (OpenAI-shaped).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmsim.api.chat_served import ChatRun, plan_chat, run_streamed, run_whole
from llmsim.api.completion_bodies import dumps_compact
from llmsim.api.errors import APIError, from_validation_error
from llmsim.api.protocol import ChatCompletionRequest, RequestInvalid
from llmsim.api.response_store import ResponseStore
from llmsim.api.routes import _arrival, _state, _tool_call_id, bad_request, parse_body
from llmsim.engine.errors import EngineStopped, RequestAborted
from llmsim.types import FinishReason, TokenEvent

_TEXT_PARTS = ("input_text", "output_text", "text")
_ROLES = ("user", "assistant", "system", "developer")


class ResponsesRequest(BaseModel):
    """vLLM's ResponsesRequest (the fields llmsim reads; others are accepted and ignored)."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    # Strict, as the chat route's max_tokens: a JSON true is not the number 1.
    max_output_tokens: Annotated[int, Field(strict=True)] | None = None
    previous_response_id: str | None = None
    store: bool | None = True
    stream: bool | None = False
    temperature: Annotated[float, Field(strict=True)] | None = None
    top_p: Annotated[float, Field(strict=True)] | None = None
    metadata: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = True

    def function_tools(self) -> list[dict[str, Any]]:
        """The ``function`` tools (built-in tools are not simulated: ignored)."""
        return [t for t in self.tools or () if t.get("type") == "function"]

    def input_messages(self) -> list[dict[str, Any]]:
        """``input`` as chat messages: a string is a user message; message items and function call outputs."""
        if isinstance(self.input, str):
            return [{"role": "user", "content": self.input}]
        out: list[dict[str, Any]] = []
        for i, item in enumerate(self.input):
            kind = item.get("type", "message")
            if kind == "message" and item.get("role") in _ROLES:
                out.append({"role": item["role"], "content": _text(item.get("content"), i)})
            elif kind == "function_call_output":
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(item.get("call_id", "")),
                        "content": str(item.get("output", "")),
                    }
                )
            elif kind == "function_call":
                function = {"name": str(item.get("name", "")), "arguments": str(item.get("arguments", ""))}
                call = {"id": str(item.get("call_id", "")), "type": "function", "function": function}
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
            else:
                raise APIError(400, f"Unsupported input item type: {kind!r}.", param=f"input.{i}")
        return out


def _text(content: Any, index: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise APIError(
                    400,
                    f"content part type '{kind}' is not supported by a text-only model",
                    param=f"input.{index}.content",
                )
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise APIError(400, "A message's content is a string or a list of text parts.", param=f"input.{index}.content")


def _chat(body: ResponsesRequest, model: str, messages: list[dict[str, Any]]) -> ChatCompletionRequest:
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    data: dict[str, Any] = {
        "model": model,
        "messages": system + messages,
        "max_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "stream": bool(body.stream),
    }
    tools = body.function_tools()
    if tools:
        data["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.get("name"),
                    "description": t.get("description"),
                    "parameters": t.get("parameters"),
                },
            }
            for t in tools
        ]
        data["parallel_tool_calls"] = body.parallel_tool_calls
        choice = body.tool_choice
        if isinstance(choice, dict):
            data["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        else:
            data["tool_choice"] = choice if choice is not None else "auto"
    try:
        return ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc) from None
    except RequestInvalid as exc:
        raise bad_request(exc) from None


async def responses(request: Request) -> Response:
    """OpenAI's ``POST /v1/responses``: a chat completion said the Responses way."""
    state = _state(request)
    arrival = _arrival(request, state)
    body = await parse_body(request, ResponsesRequest)
    previous: tuple[dict[str, Any], ...] = ()
    if body.previous_response_id is not None:
        found = state.stored_responses.get(body.previous_response_id)
        if found is None:
            raise APIError(
                404,
                f"Response with id '{body.previous_response_id}' not found.",
                param="response_id",
                err_type="invalid_request_error",
            )
        previous = found
    conversation = [*previous, *body.input_messages()]
    model = body.model if body.model is not None else next(iter(state.models))
    run = await plan_chat(request, _chat(body, model, conversation), arrival, "resp_")
    if isinstance(run, Response):
        return run
    answer = ResponsesAnswer(run, body, conversation, state.stored_responses)
    if body.stream:
        return await run_streamed(run, answer.stream)
    done = await run_whole(run)
    if isinstance(done, Response):
        return done
    tokens, cached = done
    return JSONResponse(answer.finish("".join(tokens), len(tokens), cached))


class ResponsesAnswer:
    """One response's body, streamed or whole, and its storing once complete."""

    def __init__(
        self, run: ChatRun, body: ResponsesRequest, conversation: Sequence[dict[str, Any]], store: ResponseStore
    ) -> None:
        self.run = run
        self.body = body
        self.conversation = conversation
        self.store = store
        self.created_at = int(time.time())
        self.message_id = f"msg_{uuid.uuid4().hex}"
        # Per tool call of the plan: its output item's id and its call id.
        self.call_ids = [(f"fc_{uuid.uuid4().hex}", _tool_call_id()) for _ in run.plan.tool_calls]
        context = run.served.context_length
        self.max_output_tokens = (
            body.max_output_tokens if body.max_output_tokens is not None else context - run.prompt_tokens
        )

    def response(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        body = self.body
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": self.run.request_id,
            "created_at": self.created_at,
            "incomplete_details": incomplete,
            "instructions": body.instructions,
            "metadata": body.metadata,
            "model": self.run.model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": body.parallel_tool_calls is not False,
            "temperature": 1.0 if body.temperature is None else body.temperature,
            "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
            "tools": body.function_tools(),
            "top_p": 1.0 if body.top_p is None else body.top_p,
            "background": False,
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": None,
            "previous_response_id": body.previous_response_id,
            "prompt": None,
            "reasoning": None,
            "service_tier": "auto",
            "status": status,
            "text": None,
            "top_logprobs": None,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
        }

    def message(self, text: str, status: str) -> dict[str, Any]:
        content: list[dict[str, Any]] = (
            [{"type": "output_text", "text": text, "annotations": [], "logprobs": None}] if text else []
        )
        return {"id": self.message_id, "type": "message", "role": "assistant", "status": status, "content": content}

    def function_call(self, index: int, arguments: str, status: str) -> dict[str, Any]:
        item_id, call_id = self.call_ids[index]
        name = self.run.plan.tool_calls[index].name
        return {
            "type": "function_call",
            "id": item_id,
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": status,
        }

    @property
    def calls_tools(self) -> bool:
        return bool(self.run.plan.tool_calls)

    def finish(self, text: str, said: int, cached: int) -> dict[str, Any]:
        """The completed response (stored, unless ``store: false``)."""
        plan = self.run.plan
        if said < plan.num_output_tokens:
            status = "cancelled"
        elif plan.finish_reason is FinishReason.LENGTH:
            status = "incomplete"
        else:
            status = "completed"
        usage = {
            "input_tokens": self.run.prompt_tokens,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": said,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.run.prompt_tokens + said,
        }
        answer: dict[str, Any] = {"role": "assistant", "content": text}
        if plan.tool_calls and said == plan.num_output_tokens:
            # Whole tool calls: function_call items (cut ones are text, as on the chat route).
            calls = plan.tool_calls
            output = [self.function_call(i, c.arguments, "completed") for i, c in enumerate(calls)]
            answer = {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": self.call_ids[i][1],
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for i, c in enumerate(calls)
                ],
            }
        else:
            # As vLLM: one message item, "completed" whatever the response's status; no text, no part.
            output = [self.message(text, "completed")]
        if self.body.store is not False:
            self.store.put(self.run.request_id, [*self.conversation, answer])
        return self.response(status, output, usage)

    def stream(self, cached: Callable[[], int]) -> ResponsesStream:
        return ResponsesStream(self, cached)


class ResponsesStream:
    """vLLM's events of a streamed text response, each ``event: <type>`` with a ``sequence_number``.

    ``response.created`` and ``response.in_progress`` at once; with the first text,
    ``response.output_item.added`` and ``response.content_part.added``; one
    ``response.output_text.delta`` per token; then ``response.output_text.done``,
    ``response.content_part.done``, ``response.output_item.done`` and ``response.completed``.
    """

    def __init__(self, answer: ResponsesAnswer, cached: Callable[[], int]) -> None:
        self._answer = answer
        self._cached = cached
        self._run = answer.run
        self._seq = 0
        self._started = False
        self._item_open = False
        self._text: list[str] = []
        self._lags: list[float] = []
        # The tool call whose item is open, and its arguments so far.
        self._call: int | None = None
        self._arguments: list[str] = []

    def _event(self, kind: str, fields: dict[str, Any]) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + dumps_compact(data) + b"\n\n"

    def head(self) -> bytes:
        """As vLLM: ``response.created`` and ``response.in_progress`` at once, before any token."""
        return self._start()

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        pending = self._answer.response("in_progress", [], None)
        return self._event("response.created", {"response": pending}) + self._event(
            "response.in_progress", {"response": pending}
        )

    def _where(self) -> dict[str, Any]:
        return {"output_index": 0, "item_id": self._answer.message_id, "content_index": 0}

    def encode(self, event: TokenEvent) -> bytes:
        self._lags.append(self._run.now() - event.sim_time)
        self._text.append(event.text)
        out = self._start()
        if self._answer.calls_tools:
            return out + self._tool_delta(event)
        if not event.text:
            return out
        if not self._item_open:
            self._item_open = True
            item = self._answer.message("", "in_progress") | {"content": []}
            out += self._event("response.output_item.added", {"output_index": 0, "item": item})
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out += self._event("response.content_part.added", self._where() | {"part": part})
        return out + self._event("response.output_text.delta", self._where() | {"delta": event.text, "logprobs": []})

    def _tool_delta(self, event: TokenEvent) -> bytes:
        tool = self._run.plan.tool_deltas[event.index]
        if tool is None:
            return b""  # a token of the call's wrapper: the tool-call parser says nothing for it
        out = b""
        if tool.name is not None:
            out += self._close_call()
            self._call = tool.index
            item = self._answer.function_call(tool.index, "", "in_progress")
            out += self._event("response.output_item.added", {"output_index": tool.index, "item": item})
        if tool.arguments and self._call is not None:
            self._arguments.append(tool.arguments)
            item_id = self._answer.call_ids[self._call][0]
            fields = {"output_index": self._call, "item_id": item_id, "delta": tool.arguments}
            out += self._event("response.function_call_arguments.delta", fields)
        return out

    def _close_call(self) -> bytes:
        if self._call is None:
            return b""
        index, self._call = self._call, None
        arguments = "".join(self._arguments)
        self._arguments = []
        item_id = self._answer.call_ids[index][0]
        fields = {"output_index": index, "item_id": item_id, "arguments": arguments}
        out = self._event("response.function_call_arguments.done", fields)
        item = self._answer.function_call(index, arguments, "completed")
        return out + self._event("response.output_item.done", {"output_index": index, "item": item})

    def tail(self) -> bytes:
        out = self._start() + self._close_call()
        text = "".join(self._text)
        final = self._answer.finish(text, len(self._text), self._cached())
        if self._item_open:
            out += self._event("response.output_text.done", self._where() | {"text": text, "logprobs": []})
            part = {"type": "output_text", "text": text, "annotations": []}
            out += self._event("response.content_part.done", self._where() | {"part": part})
            out += self._event("response.output_item.done", {"output_index": 0, "item": final["output"][0]})
        return out + self._event("response.completed", {"response": final})

    def error(self, exc: Exception) -> bytes | None:
        if isinstance(exc, RequestAborted):
            return self.tail()
        if not isinstance(exc, EngineStopped):
            return None
        return self._event("error", {"code": None, "message": str(exc), "param": None})

    def close(self) -> None:
        lags, self._lags = self._lags, []
        self._run.served.observe_lags(lags)
