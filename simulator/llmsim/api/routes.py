"""The OpenAI endpoints: /v1/chat/completions, /v1/completions, /v1/models, plus /health."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmsim.api.choice_events import merged_events
from llmsim.api.completion_bodies import ChunkTemplates, completion_body
from llmsim.api.completion_stream import CompletionStream
from llmsim.api.errors import APIError, from_validation_error, model_not_found, overloaded
from llmsim.api.protocol import ChatCompletionRequest, CompletionRequest
from llmsim.api.served import ServedModel
from llmsim.api.sse_response import SSEResponse
from llmsim.api.state import ApiState
from llmsim.engine import TokenStream
from llmsim.engine.errors import EngineOverloaded, EngineStopped
from llmsim.llm.errors import ContextLengthError
from llmsim.types import GenerationPlan, GenerationRequest, RequestId

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
        base = state.lora_adapters.get(model)
        if base is None:
            raise model_not_found(model)
        served = state.models[base]
    return served


def _with_lora(requests: list[GenerationRequest], served: ServedModel, model: str) -> list[GenerationRequest]:
    """Requests naming a LoRA adapter run on its base model with that adapter (vLLM)."""
    if model == served.name:
        return requests
    return [dataclasses.replace(r, lora_name=model) for r in requests]


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
    try:
        gen_request = body.to_generation_request()
    except ValueError as exc:
        raise APIError(400, str(exc), param="messages") from None
    plans = _plan(served, _with_lora([gen_request], served, body.model))
    return await _respond(request, served, body, plans, arrival, chat=True)


async def completions(request: Request) -> Response:
    state = _state(request)
    arrival = _arrival(request, state)
    body: CompletionRequest = await _parse(request, CompletionRequest)
    served = _served(state, body.model)
    plans = _plan(served, _with_lora(body.to_generation_requests(), served, body.model))
    return await _respond(request, served, body, plans, arrival, chat=False)


async def _respond(
    request: Request,
    served: ServedModel,
    body: ChatCompletionRequest | CompletionRequest,
    plans: list[GenerationPlan],
    arrival: float,
    *,
    chat: bool,
) -> Response:
    now = _state(request).clock.now
    request_id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    created = int(time.time())
    ids = [RequestId(f"{request_id}-{i}") for i in range(len(plans))]
    prompt_tokens = _prompt_tokens(plans, body)
    # The name the client asked for: the base model's, or a LoRA adapter's (as vLLM answers).
    model = body.model
    if not body.stream:
        done = await _until_disconnect(_complete(served, plans, arrival, ids, now, body.n), request)
        if done is None:  # the client left; nobody reads this
            return Response(status_code=499)
        texts, cached = done
        details = cached if served.enable_prompt_tokens_details else None
        return JSONResponse(
            completion_body(request_id, created, model, plans, texts, prompt_tokens, details, chat=chat)
        )
    streams = await _submit(served, plans, arrival, ids)
    stream = CompletionStream(
        ChunkTemplates(request_id, created, model, chat=chat),
        plans,
        chat=chat,
        prompt_tokens=prompt_tokens,
        continuous_usage=body.continuous_usage,
        include_usage=body.include_usage,
        now=now,
        observe_lags=served.observe_lags,
        cached_tokens=partial(_cached_tokens, streams, body.n) if served.enable_prompt_tokens_details else None,
    )
    if len(streams) == 1:
        # Almost every request: the engine's stream itself, no merging hop per token.
        return SSEResponse(streams[0], partial(stream.token, 0), stream, headers=SSE_HEADERS)
    return SSEResponse(merged_events(streams), stream.merged, stream, headers=SSE_HEADERS)


def _prompt_tokens(plans: Sequence[GenerationPlan], body: ChatCompletionRequest | CompletionRequest) -> int:
    # n choices of one prompt share its prompt tokens; a batch of prompts adds them up.
    return sum(p.prompt_tokens for p in plans[:: body.n])


def _cached_tokens(streams: Sequence[TokenStream], n: int) -> int:
    """usage.prompt_tokens_details.cached_tokens: each prompt's first choice's hit, added up."""
    return sum(s.num_cached_tokens for s in streams[::n])


async def _complete(
    served: ServedModel,
    plans: Sequence[GenerationPlan],
    arrival: float,
    ids: Sequence[RequestId],
    now: Callable[[], float],
    n: int,
) -> tuple[list[list[str]], int]:
    """Each choice's released token texts, and the cached prompt tokens (lags reported once, however it ends)."""
    streams = await _submit(served, plans, arrival, ids)
    texts: list[list[str]] = [[] for _ in plans]
    lags: list[float] = []
    events = merged_events(streams)
    try:
        async for pos, event in events:
            texts[pos].append(event.text)
            lags.append(now() - event.sim_time)
    finally:
        await events.aclose()
        served.observe_lags(lags)
    return texts, _cached_tokens(streams, n)


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
    # LoRA adapters after the base models, in load order, as vLLM lists them.
    data += [
        {
            "id": name,
            "object": "model",
            "created": m.created,
            "owned_by": "llmsim",
            "root": path,
            "parent": m.name,
            "max_model_len": None,
            "permission": [],
        }
        for m in state.models.values()
        for name, path in m.lora_adapters.items()
    ]
    return JSONResponse({"object": "list", "data": data})


async def health(request: Request) -> Response:
    return Response(status_code=200)
