"""The OpenAI endpoints: /v1/chat/completions, /v1/completions, /v1/models, plus /health and /ping."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmsim.api.choice_events import merged_events
from llmsim.api.completion_bodies import ChunkTemplates, completion_body
from llmsim.api.completion_stream import CompletionStream
from llmsim.api.dropped_connection import DropConnection, DroppedResponse, DroppingEvents
from llmsim.api.errors import APIError, from_validation_error, model_not_found, overloaded
from llmsim.api.faults import FAULT_HEADER, Fault
from llmsim.api.identity import SCOPE_CLIENT_REQUEST_ID, SCOPE_REQUEST_ID
from llmsim.api.protocol import ChatCompletionRequest, CompletionRequest
from llmsim.api.served import ServedModel
from llmsim.api.sse_response import EventSource, SSEResponse
from llmsim.api.state import ApiState
from llmsim.engine import TokenStream
from llmsim.engine.errors import EngineOverloaded, EngineStopped, RequestAborted
from llmsim.llm.errors import ContextLengthError
from llmsim.types import FinishReason, GenerationPlan, GenerationRequest, RequestId, TokenEvent

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
T = TypeVar("T")


def _state(request: Request) -> ApiState:
    state: ApiState = request.app.state.llmsim
    return state


def _arrival(request: Request, state: ApiState) -> float:
    arrival = request.scope.get("llmsim.arrival")
    return float(arrival) if arrival is not None else state.clock.now()


def _served(state: ApiState, model: str) -> ServedModel:
    served = state.models.get(model)
    if served is None:
        raise model_not_found(model)
    return served


def _request_id(request: Request) -> str:
    """The client's X-Request-Id, else the one LlmsimApp made (echoed in x-request-id either way)."""
    request_id = request.scope.get(SCOPE_REQUEST_ID)
    return str(request_id) if request_id is not None else uuid.uuid4().hex


async def _until_serving(request: Request, state: ApiState, arrival: float) -> float | None:
    """Loading or shutting down: 503. Asleep: wait for /wake_up; the request's timeline starts then.

    Returns the arrival to use, or None when the client left while it waited.
    """
    if await _until_disconnect(state.lifecycle.admit(), request) is None:
        return None
    return max(arrival, state.clock.now())


def _fault(request: Request, served: ServedModel) -> Fault | None:
    """This request's fault, if the model injects any; errors and crashes happen here, before anything is queued."""
    faults = served.faults
    if not faults.enabled:
        return None
    scope = request.scope
    client_id = scope.get(SCOPE_REQUEST_ID) if scope.get(SCOPE_CLIENT_REQUEST_ID) else None
    fault = faults.draw(request.headers.get(FAULT_HEADER), client_id)
    if fault is not None:
        faults.inject(fault, _request_id(request))
    return fault


def _plan(served: ServedModel, requests: Sequence[GenerationRequest]) -> list[GenerationPlan]:
    """Run the generator (context checks first); one flat list of plans, choice index = position."""
    plans: list[GenerationPlan] = []
    for req in requests:
        try:
            plans.extend(served.generator.generate(req))
        except ContextLengthError as exc:
            raise APIError(400, exc.message, param=exc.param) from None
    return plans


async def _submit(
    served: ServedModel, plans: Sequence[GenerationPlan], arrival: float, ids: Sequence[RequestId]
) -> list[TokenStream]:
    """The one admission point: every choice gets a stream, or the request is refused before any byte is sent."""
    try:
        return await served.engine.submit(plans, arrival, ids)
    except EngineOverloaded:
        raise overloaded() from None
    except EngineStopped as exc:
        raise APIError(503, f"The model is not serving: {exc}.") from None


async def _parse(request: Request, model_cls: type[ChatCompletionRequest] | type[CompletionRequest]) -> Any:
    body = await request.body()
    try:
        return model_cls.model_validate_json(body)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise APIError(400, "Invalid JSON body: " + exc.errors()[0]["msg"]) from None
        raise from_validation_error(exc) from None


async def chat_completions(request: Request) -> Response:
    state = _state(request)
    arrival = _arrival(request, state)
    body: ChatCompletionRequest = await _parse(request, ChatCompletionRequest)
    served = _served(state, body.model)
    if not state.lifecycle.serving:
        admitted = await _until_serving(request, state, arrival)
        if admitted is None:
            return Response(status_code=499)
        arrival = admitted
    fault = _fault(request, served)
    try:
        gen_request = body.to_generation_request()
    except ValueError as exc:
        raise APIError(400, str(exc), param="messages") from None
    plans = _plan(served, [gen_request])
    return await _respond(request, served, body, plans, arrival, chat=True, fault=fault)


async def completions(request: Request) -> Response:
    state = _state(request)
    arrival = _arrival(request, state)
    body: CompletionRequest = await _parse(request, CompletionRequest)
    served = _served(state, body.model)
    if not state.lifecycle.serving:
        admitted = await _until_serving(request, state, arrival)
        if admitted is None:
            return Response(status_code=499)
        arrival = admitted
    fault = _fault(request, served)
    plans = _plan(served, body.to_generation_requests())
    return await _respond(request, served, body, plans, arrival, chat=False, fault=fault)


async def _respond(
    request: Request,
    served: ServedModel,
    body: ChatCompletionRequest | CompletionRequest,
    plans: list[GenerationPlan],
    arrival: float,
    *,
    chat: bool,
    fault: Fault | None = None,
) -> Response:
    now = _state(request).clock.now
    request_id = ("chatcmpl-" if chat else "cmpl-") + _request_id(request)
    created = int(time.time())
    ids = [RequestId(f"{request_id}-{i}") for i in range(len(plans))]
    prompt_tokens = _prompt_tokens(plans, body)
    drop_after: int | None = None
    if fault is not None:
        plans = fault.pace(plans)
        drop_after = fault.drop_after(plans)
        fault.log_where(plans, _request_id(request))
    if not body.stream:
        try:
            done = await _until_disconnect(_complete(served, plans, arrival, ids, now, drop_after), request)
        except DropConnection:
            return DroppedResponse()
        if done is None:  # the client left; nobody reads this
            return Response(status_code=499)
        texts, aborted = done
        if aborted:
            # Cut short by the engine (shutdown, sleep): as vLLM, the unfinished choices end with "abort".
            plans = [
                replace(p, finish_reason=FinishReason.ABORT) if len(t) < p.num_output_tokens else p
                for p, t in zip(plans, texts, strict=True)
            ]
        return JSONResponse(completion_body(request_id, created, served.name, plans, texts, prompt_tokens, chat=chat))
    streams = await _submit(served, plans, arrival, ids)
    stream = CompletionStream(
        ChunkTemplates(request_id, created, served.name, chat=chat),
        plans,
        chat=chat,
        prompt_tokens=prompt_tokens,
        continuous_usage=body.continuous_usage,
        include_usage=body.include_usage,
        now=now,
        observe_lags=served.observe_lags,
    )
    if len(streams) == 1:
        # Almost every request: the engine's stream itself, no merging hop per token.
        if drop_after is None:
            return SSEResponse(streams[0], partial(stream.token, 0), stream, headers=SSE_HEADERS)
        return SSEResponse(
            DroppingEvents(streams[0], drop_after), partial(stream.token, 0), stream, headers=SSE_HEADERS
        )
    merged: EventSource[tuple[int, TokenEvent]] = merged_events(streams)
    if drop_after is not None:
        merged = DroppingEvents(merged, drop_after)
    return SSEResponse(merged, stream.merged, stream, headers=SSE_HEADERS)


def _prompt_tokens(plans: Sequence[GenerationPlan], body: ChatCompletionRequest | CompletionRequest) -> int:
    # n choices of one prompt share its prompt tokens; a batch of prompts adds them up.
    return sum(p.prompt_tokens for p in plans[:: body.n])


async def _complete(
    served: ServedModel,
    plans: Sequence[GenerationPlan],
    arrival: float,
    ids: Sequence[RequestId],
    now: Callable[[], float],
    drop_after: int | None = None,
) -> tuple[list[list[str]], bool]:
    """Each choice's released token texts, and whether the engine aborted the request (lags reported once)."""
    streams = await _submit(served, plans, arrival, ids)
    texts: list[list[str]] = [[] for _ in plans]
    lags: list[float] = []
    events: EventSource[tuple[int, TokenEvent]] = merged_events(streams)
    if drop_after is not None:
        events = DroppingEvents(events, drop_after)
    aborted = False
    try:
        while True:
            try:
                pos, event = await events.__anext__()
            except StopAsyncIteration:
                break
            texts[pos].append(event.text)
            lags.append(now() - event.sim_time)
    except RequestAborted:
        aborted = True
    finally:
        await events.aclose()
        served.observe_lags(lags)
    return texts, aborted


async def _until_disconnect(awaitable: Awaitable[T], request: Request) -> T | None:
    """Await ``awaitable`` unless the client disconnects first (then cancel it, return None).

    For non-streaming responses, where Starlette does not watch the connection: a client that
    gives up must still end the request server-side, so the engine frees its KV cache.
    """
    work = asyncio.ensure_future(awaitable)

    async def disconnected() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watch = asyncio.create_task(disconnected())
    try:
        await asyncio.wait((work, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
    if work.done():
        return work.result()
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await work
    return None


async def list_models(request: Request) -> Response:
    state = _state(request)
    data: list[dict[str, Any]] = [
        {
            "id": m.name,
            "object": "model",
            "created": m.created,
            "owned_by": "llmsim",
            "root": m.name,
            "parent": None,
            "max_model_len": m.context_length,
            "permission": [],
            "llmsim": m.info.to_json(),
        }
        for m in state.models.values()
    ]
    return JSONResponse({"object": "list", "data": data})


async def health(request: Request) -> Response:
    """vLLM's readiness: 200, or 503 (empty body) while the model loads and once shutdown begins."""
    return Response(status_code=200 if _state(request).lifecycle.healthy else 503)


async def ping(request: Request) -> Response:
    """Liveness: 200 as long as the process serves HTTP (loading, asleep or draining)."""
    return Response(status_code=200)
