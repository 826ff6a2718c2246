"""The OpenAI endpoints: /v1/chat/completions, /v1/completions, /v1/models, plus /health."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import aclosing
from functools import partial
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmsim.api.errors import APIError, from_validation_error, model_not_found, overloaded
from llmsim.api.event_stream import EventStreamResponse
from llmsim.api.schemas import ChatCompletionRequest, CompletionRequest
from llmsim.api.served import ServedModel
from llmsim.api.sse import ChunkTemplates
from llmsim.api.state import ApiState
from llmsim.api.stream_encoder import StreamEncoder
from llmsim.api.streaming import merged_events, until_disconnect
from llmsim.engine.errors import EngineOverloaded
from llmsim.llm.errors import ContextLengthError
from llmsim.types import GenerationPlan, GenerationRequest, RequestId

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


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


def _plan(served: ServedModel, requests: Sequence[GenerationRequest]) -> list[GenerationPlan]:
    """Run the generator (context checks first); one flat list of plans, choice index = position."""
    plans: list[GenerationPlan] = []
    for req in requests:
        try:
            plans.extend(served.generator.generate(req))
        except ContextLengthError as exc:
            raise APIError(400, exc.message, param=exc.param) from None
    if not served.engine.accepting():
        raise overloaded()
    return plans


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
    plans = _plan(served, [gen_request])
    return await _respond(request, served, body, plans, arrival, chat=True)


async def completions(request: Request) -> Response:
    state = _state(request)
    arrival = _arrival(request, state)
    body: CompletionRequest = await _parse(request, CompletionRequest)
    served = _served(state, body.model)
    plans = _plan(served, body.to_generation_requests())
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
    if body.stream:
        encoder = StreamEncoder(
            ChunkTemplates(request_id, created, served.name, chat=chat),
            plans,
            chat=chat,
            prompt_tokens=_prompt_tokens(plans, body),
            continuous_usage=body.continuous_usage,
            include_usage=body.include_usage,
            now=now,
            observe_lags=served.observe_lags,
        )
        if len(plans) == 1:
            # Almost every request: the engine iterator itself, no merging hop per token.
            single = served.engine.run(plans[0], arrival, ids[0])
            return EventStreamResponse(single, partial(encoder.token, 0), encoder, headers=SSE_HEADERS)
        merged = merged_events(served.engine, plans, arrival, ids)
        return EventStreamResponse(merged, encoder.merged, encoder, headers=SSE_HEADERS)
    try:
        result = await until_disconnect(_collect(served, plans, arrival, ids, now), request)
    except EngineOverloaded:
        # The queue filled between the check in _plan and the engine (n > 1, or a race).
        raise overloaded() from None
    if result is None:  # the client left; nobody reads this
        return Response(status_code=499)
    texts = result
    prompt_tokens = _prompt_tokens(plans, body)
    completion_tokens = sum(len(t) for t in texts)
    choices: list[dict[str, Any]] = []
    for i, (tokens, plan) in enumerate(zip(texts, plans, strict=True)):
        text = "".join(tokens)
        finish = plan.finish_reason
        if chat:
            message = {"role": "assistant", "content": text, "tool_calls": []}
            choices.append({"index": i, "message": message, "logprobs": None, "finish_reason": finish.value})
        else:
            choices.append({"index": i, "text": text, "logprobs": None, "finish_reason": finish.value})
    payload = {
        "id": request_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": served.name,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        },
    }
    return JSONResponse(payload)


def _prompt_tokens(plans: Sequence[GenerationPlan], body: ChatCompletionRequest | CompletionRequest) -> int:
    # n choices of one prompt share its prompt tokens; a batch of prompts adds them up.
    return sum(p.prompt_tokens for p in plans[:: body.n])


async def _collect(
    served: ServedModel,
    plans: Sequence[GenerationPlan],
    arrival: float,
    ids: Sequence[RequestId],
    now: Callable[[], float],
) -> list[list[str]]:
    """Each choice's released token texts (lags reported once, however it ends)."""
    texts: list[list[str]] = [[] for _ in plans]
    lags: list[float] = []
    try:
        async with aclosing(merged_events(served.engine, plans, arrival, ids)) as events:
            async for pos, event in events:
                texts[pos].append(event.text)
                lags.append(now() - event.sim_time)
    finally:
        served.observe_lags(lags)
    return texts


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
            **({"llmsim": m.info} if m.info else {}),
        }
        for m in state.models.values()
    ]
    return JSONResponse({"object": "list", "data": data})


async def health(request: Request) -> Response:
    return Response(status_code=200)
