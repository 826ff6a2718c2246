"""Serving a chat request for another API's route (Anthropic's Messages, OpenAI's Responses), as vLLM does.

vLLM serves those APIs by converting the request to a chat request and running its chat path;
so do these helpers: the same generator, faults, engine timeline and metrics as
``/v1/chat/completions``, one choice, the answer left to the route to say its own way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response

from llmsim.api.protocol import ChatCompletionRequest
from llmsim.api.routes import (
    SSE_HEADERS,
    _complete,
    _request_id,
    _state,
    _submit,
    _until_disconnect,
    admit_chat,
)
from llmsim.api.served import ServedModel
from llmsim.transport import DropConnection, DroppedResponse, DroppingEvents, EventSource, SSEResponse
from llmsim.transport.sse_response import StreamBody
from llmsim.types import GenerationPlan, RequestId, TokenEvent


class EventStream(StreamBody, Protocol):
    """A route's stream: the bytes of each token's event, and what StreamBody says."""

    def encode(self, event: TokenEvent) -> bytes: ...

    def head(self) -> bytes:
        """What is written at once, before the first token (b"": nothing)."""
        ...


@dataclass(frozen=True)
class ChatRun:
    """One planned chat choice, not yet submitted to the engine."""

    request: Request
    served: ServedModel
    plan: GenerationPlan
    arrival: float
    request_id: str
    #: The name to answer with: the one asked for (an alias: the model's first name).
    model: str
    drop_after: int | None

    @property
    def prompt_tokens(self) -> int:
        return self.plan.prompt_tokens

    @property
    def now(self) -> Callable[[], float]:
        return _state(self.request).clock.now


async def plan_chat(request: Request, chat: ChatCompletionRequest, arrival: float, prefix: str) -> ChatRun | Response:
    """Check, admit and plan ``chat`` as the chat route does (its faults drawn); a Response if the client left."""
    admitted = await admit_chat(request, chat, arrival)
    if isinstance(admitted, Response):
        return admitted
    served, fault, plans = admitted.served, admitted.fault, admitted.plans
    drop_after: int | None = None
    if fault is not None:
        plans = fault.pace(plans)
        drop_after = fault.drop_after(plans)
        fault.log_where(plans, _request_id(request))
    model = served.name if chat.model in served.aliases else chat.model
    return ChatRun(request, served, plans[0], admitted.arrival, prefix + _request_id(request), model, drop_after)


def _ids(run: ChatRun) -> list[RequestId]:
    return [RequestId(f"{run.request_id}-0")]


async def run_whole(run: ChatRun) -> tuple[list[str], int] | Response:
    """The choice's released token texts and its cached prompt tokens; a Response if the connection ends first."""
    work = _complete(run.served, [run.plan], run.arrival, _ids(run), run.now, 1, run.drop_after)
    try:
        done = await _until_disconnect(work, run.request)
    except DropConnection:
        return DroppedResponse()
    if done is None:  # the client left; nobody reads this
        return Response(status_code=499)
    texts, _aborted, cached = done
    return texts[0], cached


async def run_streamed(run: ChatRun, make: Callable[[Callable[[], int]], EventStream]) -> Response:
    """The choice streamed, one event per token by ``make(cached_tokens)``'s stream."""
    streams = await _submit(run.served, [run.plan], run.arrival, _ids(run))
    stream = make(lambda: streams[0].num_cached_tokens)
    events: EventSource[TokenEvent] = streams[0]
    if run.drop_after is not None:
        events = DroppingEvents(events, run.drop_after)
    state = _state(run.request)
    return SSEResponse(events, stream.encode, stream, headers=SSE_HEADERS, gate=state.release_gate, head=stream.head())
