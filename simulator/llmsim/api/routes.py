"""The endpoints: OpenAI's (/v1/chat/completions, /v1/completions, /v1/models) and vLLM's (/tokenize, /detokenize, /health, /ping)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from pydantic import BaseModel, RootModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmsim.api import data_parallel, json_body
from llmsim.api import kv_transfer as kv
from llmsim.api.choice_events import YIELD_EVERY, merged_events
from llmsim.api.completion_bodies import ChunkTemplates, Echo, completion_body
from llmsim.api.completion_stream import CompletionStream
from llmsim.api.errors import (
    APIError,
    from_validation_error,
    model_not_found,
    overloaded,
    unsupported_media_type,
    validation_failed,
)
from llmsim.api.faults import FAULT_HEADER, Fault
from llmsim.api.identity import SCOPE_CLIENT_REQUEST_ID, SCOPE_REQUEST_ID
from llmsim.api.output_limit import check_planned, check_requested
from llmsim.api.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    RequestInvalid,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
)
from llmsim.api.served import ServedModel
from llmsim.api.state import ApiState
from llmsim.engine import TokenStream
from llmsim.engine.errors import EngineOverloaded, EngineStopped, RequestAborted, RequestFailed
from llmsim.llm.errors import ContextLengthError, ResponseFormatError
from llmsim.transport import ARRIVAL_KEY, DropConnection, DroppedResponse, DroppingEvents, EventSource, SSEResponse
from llmsim.types import FinishReason, GenerationPlan, GenerationRequest, Message, RequestId, TokenEvent

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
T = TypeVar("T")

logger = logging.getLogger("llmsim.api")


def _state(request: Request) -> ApiState:
    state: ApiState = request.app.state.llmsim
    return state


def _arrival(request: Request, state: ApiState) -> float:
    arrival = request.scope.get(ARRIVAL_KEY)
    return float(arrival) if arrival is not None else state.clock.now()


def _served(state: ApiState, model: str) -> ServedModel:
    served = state.models.get(model) or state.models.get(state.aliases.get(model, ""))
    if served is None:
        base = state.lora_adapters.get(model)
        if base is None:
            raise model_not_found(model)
        served = state.models[base]
    return served


def _served_or_first(state: ApiState, model: str | None) -> ServedModel:
    # vLLM: a request without `model` is for the (first) served model.
    return _served(state, model) if model is not None else next(iter(state.models.values()))


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


def _fault(request: Request, served: ServedModel, arrival: float) -> Fault | None:
    """This request's fault, if the model injects any; errors and crashes happen here, before anything is queued.

    A started timeline records the request at ``arrival`` (its bytes' stamp, the engine's too),
    not at this call, which comes after its body was read and parsed.
    """
    timeline = served.timeline
    if timeline is not None and timeline.started_at is not None:
        # Before the draw: a request after a phase's start sees that phase, whenever the task woke.
        timeline.poll()
    else:
        timeline = None
    faults = served.faults
    if not faults.enabled:
        if timeline is not None:
            timeline.record(None, arrival)
        return None
    scope = request.scope
    client_id = scope.get(SCOPE_REQUEST_ID) if scope.get(SCOPE_CLIENT_REQUEST_ID) else None
    fault = faults.draw(request.headers.get(FAULT_HEADER), client_id)
    if timeline is not None:
        timeline.record(fault.kind if fault is not None else None, arrival)
    if fault is not None:
        faults.inject(fault, _request_id(request))
    return fault


def _with_lora(requests: list[GenerationRequest], served: ServedModel, model: str) -> list[GenerationRequest]:
    """Requests naming a LoRA adapter run on its base model with that adapter (vLLM)."""
    if model == served.name or model in served.aliases:
        return requests
    return [dataclasses.replace(r, lora_name=model) for r in requests]


#: Bodies larger than this are tokenized and matched in a worker thread: the tokenizer works on a
#: long prompt in slices (llm/tokenizer.py), so the event loop takes the GIL back between them and
#: one huge prompt never holds the other requests for more than a few milliseconds.
OFFLOAD_BYTES = 64 * 1024


async def _off_loop(request: Request, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` here, or in a worker thread when the request's body is large."""
    if len(await request.body()) > OFFLOAD_BYTES:
        return await asyncio.to_thread(fn, *args, **kwargs)
    return fn(*args, **kwargs)


#: Requests that may produce more output tokens than this are planned, and their non-streamed
#: bodies rendered, in a worker thread whatever their body's size: that work grows with the output
#: (prompts × n × max_tokens), not with the request's bytes.
OFFLOAD_OUTPUT_TOKENS = 16 * 1024


async def _plan(request: Request, served: ServedModel, requests: Sequence[GenerationRequest]) -> list[GenerationPlan]:
    """Run the generator (output limit and context checks first); one flat list of plans, choice index = position."""
    limit = _state(request).max_request_output_tokens
    if check_requested(requests, served.context_length, limit) > OFFLOAD_OUTPUT_TOKENS:
        plans = await asyncio.to_thread(_generate, served, requests)
    else:
        plans = await _off_loop(request, _generate, served, requests)
    check_planned(requests, plans, limit)
    return plans


def _generate(served: ServedModel, requests: Sequence[GenerationRequest]) -> list[GenerationPlan]:
    plans: list[GenerationPlan] = []
    for req in requests:
        try:
            plans.extend(served.generator.generate(req))
        except ContextLengthError as exc:
            raise APIError(400, exc.message, param=exc.param) from None
        except ResponseFormatError as exc:
            raise APIError(400, exc.message, param="response_format") from None
    return plans


async def _submit(
    served: ServedModel, plans: Sequence[GenerationPlan], arrival: float, ids: Sequence[RequestId]
) -> list[TokenStream]:
    """The one admission point: every choice gets a stream, or the request is refused before any byte is sent."""
    try:
        return await data_parallel.submit(served, plans, arrival, ids)
    except EngineOverloaded:
        raise overloaded() from None
    except EngineStopped as exc:
        raise APIError(503, f"The model is not serving: {exc}.") from None


M = TypeVar("M", bound=BaseModel)


def bad_request(exc: RequestInvalid) -> APIError:
    """vLLM's answer to its VLLMValidationError: 400 BadRequestError, the parameter as ``param``."""
    return APIError(400, str(exc), param=exc.parameter)


async def parse_body(request: Request, model_cls: type[M]) -> M:
    """The JSON body as ``model_cls``, or vLLM's 400 (content type, JSON syntax, fields, its own checks).

    As vLLM (FastAPI): a body without a content type is parsed first (bad JSON is reported as
    such), then refused for its missing type; any type other than application/json is refused
    before parsing.
    """
    content_type = request.headers.get("content-type")
    body = await request.body()
    if content_type is not None and content_type.split(";", 1)[0].strip().lower() != "application/json":
        raise unsupported_media_type()
    if not body:
        raise validation_failed([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    # NOTE: json, then the model in Python mode, as FastAPI does for vLLM: pydantic's JSON mode
    # words some errors differently ("a valid array" for "a valid list").
    data = json_body.loads(body)
    data_parallel.pin_rank(request, data)
    try:
        parsed = model_cls.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc) from None
    except RequestInvalid as exc:
        raise bad_request(exc) from None
    if content_type is None:
        raise unsupported_media_type()
    return parsed


def _check(body: ChatCompletionRequest | CompletionRequest, served: ServedModel) -> None:
    try:
        body.check(vocab_size=served.generator.vocab_size)
    except RequestInvalid as exc:
        raise bad_request(exc) from None
    kv_info = served.kv_transfer
    _log_ignored(body, kv.BOOTSTRAP_FIELDS if kv_info is not None and kv_info.role != "kv_both" else ())


def _log_ignored(body: BaseModel, acted_on: tuple[str, ...] = ()) -> None:
    """Name the fields a body carries that llmsim does not know, as vLLM does (and acts on none of
    them); ``acted_on``: extra fields this model does act on (SGLang's bootstrap fields)."""
    extra = body.model_extra
    if extra:
        # SGLang's data_parallel_rank is acted on (api/data_parallel.py), not ignored.
        ignored = sorted(k for k in extra if k not in acted_on and k != data_parallel.BODY_FIELD)
        if ignored:
            logger.warning("The following fields were present in the request but ignored: %s", ignored)


def _with_handoff(
    plans: list[GenerationPlan], body: ChatCompletionRequest | CompletionRequest, served: ServedModel
) -> list[GenerationPlan]:
    """Mark the first choice as a prefill or decode leg from ``kv_transfer_params`` (docs/pd.md)."""
    handoff = kv.handoff(body.kv_transfer_params, served.kv_transfer) or kv.bootstrap_handoff(
        body.model_extra, served.kv_transfer
    )
    if handoff is None or not plans:
        return plans
    first = plans[0]
    if handoff.held_as is not None and first.num_output_tokens > 1:
        # An SGLang prefill server computes the prompt and one token, whatever max_tokens says.
        ids = first.token_ids
        first = replace(
            first,
            tokens=first.tokens[:1],
            token_ids=ids[:1] if ids is not None else None,
            tool_calls=(),
            tool_deltas=first.tool_deltas[:1],
            finish_reason=FinishReason.LENGTH,
        )
    finish = first.finish_reason
    limit = body.effective_max_tokens()
    if handoff.remote_decode and limit is not None and first.num_output_tokens >= limit:
        # vLLM checks the length before the stop token: an answer cut at max_tokens says "length".
        finish = FinishReason.LENGTH
    return [replace(first, kv_handoff=handoff, finish_reason=finish), *plans[1:]]


@dataclasses.dataclass(frozen=True, slots=True)
class AdmittedChat:
    """A chat request checked, admitted (its arrival moved past a sleep or startup) and planned."""

    served: ServedModel
    fault: Fault | None
    plans: list[GenerationPlan]
    arrival: float


async def admit_chat(request: Request, body: ChatCompletionRequest, arrival: float) -> AdmittedChat | Response:
    """The chat path up to the engine, shared by every route that serves a chat (its fault drawn);
    a Response (499) if the client left while the model was not serving."""
    state = _state(request)
    served = _served(state, body.model)
    _check(body, served)
    if not state.lifecycle.serving:
        admitted = await _until_serving(request, state, arrival)
        if admitted is None:
            return Response(status_code=499)
        arrival = admitted
    fault = _fault(request, served, arrival)
    try:
        gen_request = body.to_generation_request()
    except ValueError as exc:
        raise APIError(400, str(exc), param="messages") from None
    plans = await _plan(request, served, _with_lora([gen_request], served, body.model))
    return AdmittedChat(served, fault, plans, arrival)


async def chat_completions(request: Request) -> Response:
    state = _state(request)
    arrival = _arrival(request, state)
    body = await parse_body(request, ChatCompletionRequest)
    chat = await admit_chat(request, body, arrival)
    if isinstance(chat, Response):
        return chat
    return await _respond(request, chat.served, body, chat.plans, chat.arrival, chat=True, fault=chat.fault)


async def completions(request: Request) -> Response:
    state = _state(request)
    arrival = _arrival(request, state)
    body = await parse_body(request, CompletionRequest)
    served = _served(state, body.model)
    _check(body, served)
    if not state.lifecycle.serving:
        admitted = await _until_serving(request, state, arrival)
        if admitted is None:
            return Response(status_code=499)
        arrival = admitted
    fault = _fault(request, served, arrival)
    requests = _with_lora(body.to_generation_requests(), served, body.model)
    plans = await _plan(request, served, requests)
    echo = _echo(served, requests, body.n) if body.echo else None
    return await _respond(request, served, body, plans, arrival, chat=False, echo=echo, fault=fault)


def _echo(served: ServedModel, requests: Sequence[GenerationRequest], n: int) -> list[Echo]:
    """Per choice, its prompt as ``echo`` says it back: the text, and the tokens (for logprobs)."""
    out: list[Echo] = []
    generator = served.generator
    for req in requests:
        if req.prompt_token_ids is not None:
            ids = req.prompt_token_ids
            said = Echo(generator.detokenize(ids), tuple(generator.token_strings(ids)))
        else:
            text = req.messages[0].content
            said = Echo(text, tuple(generator.tokenize_text(text)[0]))
        out += [said] * n
    return out


def _tool_call_id() -> str:
    # vLLM's make_tool_call_id(): "chatcmpl-tool-" and a 16-hex random id.
    return f"chatcmpl-tool-{uuid.uuid4().hex[:16]}"


async def _respond(
    request: Request,
    served: ServedModel,
    body: ChatCompletionRequest | CompletionRequest,
    plans: list[GenerationPlan],
    arrival: float,
    *,
    chat: bool,
    echo: list[Echo] | None = None,
    fault: Fault | None = None,
) -> Response:
    state = _state(request)
    now = state.clock.now
    gate = state.release_gate
    logprobs = body.num_logprobs
    named_tool = isinstance(body, ChatCompletionRequest) and body.named_tool is not None
    tool_call_ids = [[_tool_call_id() for _ in p.tool_calls] for p in plans]
    request_id = ("chatcmpl-" if chat else "cmpl-") + _request_id(request)
    created = int(time.time())
    ids = [RequestId(f"{request_id}-{i}") for i in range(len(plans))]
    prompt_tokens = _prompt_tokens(plans, body)
    # The name the client asked for: the base model's, or a LoRA adapter's (as vLLM answers); an
    # alias is answered with the model's first name, as vLLM answers with its first served name.
    model = served.name if body.model in served.aliases else body.model
    plans = _with_handoff(plans, body, served)
    drop_after: int | None = None
    if fault is not None:
        plans = fault.pace(plans)
        drop_after = fault.drop_after(plans)
        fault.log_where(plans, _request_id(request))
    if not body.stream:
        try:
            done = await _until_disconnect(_complete(served, plans, arrival, ids, now, body.n, drop_after), request)
        except DropConnection:
            return DroppedResponse()
        except RequestFailed:
            raise APIError(500, "Internal server error") from None
        if done is None:  # the client left; nobody reads this
            return Response(status_code=499)
        texts, aborted, cached = done
        kv_params = None
        handoff = plans[0].kv_handoff if plans else None
        if handoff is not None and handoff.remote_decode:
            held = served.held_for_pull(ids[0])
            if held is not None:
                kv_params = kv.prefill_answer(held[0], ids[0], held[1])
        if aborted:
            # Cut short by the engine (shutdown, sleep): as vLLM, the unfinished choices end with "abort".
            plans = [
                replace(p, finish_reason=FinishReason.ABORT) if len(t) < p.num_output_tokens else p
                for p, t in zip(plans, texts, strict=True)
            ]
        render = partial(
            _render_body,
            request_id,
            created,
            model,
            plans,
            texts,
            prompt_tokens,
            cached if served.enable_prompt_tokens_details else None,
            chat=chat,
            logprobs=logprobs,
            echo=echo,
            named_tool=named_tool,
            tool_call_ids=tool_call_ids,
            kv_transfer_params=kv_params,
        )
        if sum(len(t) for t in texts) > OFFLOAD_OUTPUT_TOKENS:
            # A body of megabytes: built and encoded off the loop, which gets the GIL back every
            # switch interval (5 ms) meanwhile.
            return await asyncio.to_thread(render)
        return render()
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
        logprobs=logprobs,
        echo=echo,
        named_tool=named_tool,
        tool_call_ids=tool_call_ids,
        cached_tokens=partial(_cached_tokens, streams, body.n) if served.enable_prompt_tokens_details else None,
    )
    if len(streams) == 1:
        # Almost every request: the engine's stream itself, no merging hop per token.
        if drop_after is None:
            if not stream.templated:
                return SSEResponse(streams[0], partial(stream.encode, 0), stream, headers=SSE_HEADERS, gate=gate)
            # Each token's chunk made while its step runs, its lag and count taken as it is written.
            return SSEResponse(
                streams[0],
                partial(stream.encode, 0),
                stream,
                headers=SSE_HEADERS,
                prepare=partial(stream.chunk, 0),
                commit=partial(stream.count, 0),
                gate=gate,
            )
        return SSEResponse(
            DroppingEvents(streams[0], drop_after), partial(stream.encode, 0), stream, headers=SSE_HEADERS, gate=gate
        )
    merged: EventSource[tuple[int, TokenEvent]] = merged_events(streams)
    if drop_after is not None:
        merged = DroppingEvents(merged, drop_after)
    return SSEResponse(merged, stream.merged, stream, headers=SSE_HEADERS, gate=gate)


def _render_body(*args: Any, kv_transfer_params: dict[str, Any] | None = None, **kwargs: Any) -> Response:
    body = completion_body(*args, **kwargs)
    if kv_transfer_params is not None:
        body["kv_transfer_params"] = kv_transfer_params
    return JSONResponse(body)


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
    drop_after: int | None = None,
) -> tuple[list[list[str]], bool, int]:
    """Each choice's released token texts, whether the engine aborted the request, and the cached prompt tokens.

    Lags are reported once, however it ends.
    """
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
            if len(lags) >= YIELD_EVERY:
                # Tokens already due come without a suspension (the instant engine's all are):
                # the loop gets a turn every slice, and the lags are recorded a slice at a time.
                served.observe_lags(lags)
                lags.clear()
                await asyncio.sleep(0)
    except RequestAborted:
        aborted = True
    finally:
        await events.aclose()
        served.observe_lags(lags)
    return texts, aborted, _cached_tokens(streams, n)


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
    # A model's aliases follow its name, as vLLM lists its served names.
    data: list[dict[str, Any]] = [
        {
            "id": name,
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
        for name in (m.name, *m.aliases)
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


def _unhealthy_fault(served: ServedModel) -> bool:
    """Whether the model's current fault state fails the health check (``unhealthy``, from a timeline phase or /admin/faults)."""
    timeline = served.timeline
    if timeline is not None and timeline.started_at is not None:
        # As a request does: a check after a phase's start sees that phase, whenever the task woke.
        timeline.poll()
    return served.faults.settings.unhealthy


async def health(request: Request) -> Response:
    """vLLM's readiness: 200, or 503 (empty body) while the model loads, once shutdown begins, and while
    a served model's fault state says ``unhealthy``."""
    state = _state(request)
    healthy = state.lifecycle.healthy and not any(_unhealthy_fault(served) for served in state.models.values())
    return Response(status_code=200 if healthy else 503)


async def ping(request: Request) -> Response:
    """Liveness: 200 as long as the process serves HTTP (loading, asleep or draining)."""
    return Response(status_code=200)


class TokenizeRequest(RootModel[TokenizeCompletionRequest | TokenizeChatRequest]):
    """vLLM's TokenizeRequest: a completions prompt or chat messages, told apart by their fields."""


async def tokenize(request: Request) -> Response:
    """vLLM's ``POST /tokenize``: the prompt's token ids as the model would see them."""
    state = _state(request)
    body = (await parse_body(request, TokenizeRequest)).root
    served = _served_or_first(state, body.model)
    generator = served.generator
    if isinstance(body, TokenizeChatRequest):
        try:
            messages = tuple(Message(m.role, m.text()) for m in body.messages)
        except ValueError as exc:
            raise APIError(400, str(exc), param="messages") from None
        tokens, ids = await _off_loop(
            request,
            generator.tokenize_chat,
            messages,
            add_generation_prompt=body.add_generation_prompt,
            continue_final_message=body.continue_final_message,
            add_special_tokens=body.add_special_tokens,
        )
    else:
        tokens, ids = await _off_loop(
            request, generator.tokenize_text, body.prompt, add_special_tokens=body.add_special_tokens
        )
    token_strs = tokens if body.return_token_strs else None
    return JSONResponse(
        {"count": len(ids), "max_model_len": served.context_length, "tokens": ids, "token_strs": token_strs}
    )


async def detokenize(request: Request) -> Response:
    """vLLM's ``POST /detokenize``: the text of token ids."""
    state = _state(request)
    body = await parse_body(request, DetokenizeRequest)
    served = _served_or_first(state, body.model)
    top = max(body.tokens, default=-1)
    if top >= served.generator.vocab_size:
        raise APIError(400, f"Token id {top} is out of vocabulary")
    return JSONResponse({"prompt": served.generator.detokenize(body.tokens)})


async def embeddings(request: Request) -> Response:
    """OpenAI's ``POST /v1/embeddings``: one deterministic unit vector per input, after its prefill on the engine."""
    state = _state(request)
    arrival = _arrival(request, state)
    body = await parse_body(request, EmbeddingRequest)
    if body.model is None:
        # No model named: the first that serves embeddings (vLLM's: the one served model).
        served = next((m for m in state.models.values() if m.embedding_dimensions), next(iter(state.models.values())))
    else:
        served = _served(state, body.model)
    if not state.lifecycle.serving:
        admitted = await _until_serving(request, state, arrival)
        if admitted is None:
            return Response(status_code=499)
        arrival = admitted
    dimensions = served.embedding_dimensions
    if dimensions is None:
        # NOTE: vLLM serving a generative model has no such route (404); a 404 in OpenAI's shape.
        raise APIError(404, f"The model `{served.name}` does not support the Embeddings API.", param="model")
    keep = body.dimensions
    if keep is not None and not 1 <= keep <= dimensions:
        raise APIError(400, f"Model '{served.name}' only supports dimensions in range [1, {dimensions}], got {keep}.")
    generator = served.generator
    inputs = body.texts_and_ids()
    for item in inputs:
        if isinstance(item, list):
            if not item:
                raise APIError(400, "The decoder prompt cannot be empty")
            if max(item) >= generator.vocab_size:
                raise APIError(400, f"Token id {max(item)} is out of vocabulary")

    def tokenize_inputs() -> list[list[str]]:
        return [
            generator.token_strings(item)
            if isinstance(item, list)
            else generator.tokenize_text(item, add_special_tokens=body.add_special_tokens)[0]
            for item in inputs
        ]

    tokens = await _off_loop(request, tokenize_inputs)
    try:
        plans = [generator.embedding_plan(len(t)) for t in tokens]
    except ContextLengthError as exc:
        raise APIError(400, exc.message, param=exc.param) from None
    request_id = "embd-" + _request_id(request)
    ids = [RequestId(f"{request_id}-{i}") for i in range(len(plans))]
    done = await _until_disconnect(_complete(served, plans, arrival, ids, state.clock.now, 1), request)
    if done is None:  # the client left; nobody reads this
        return Response(status_code=499)
    data = []
    for i, toks in enumerate(tokens):
        vector = generator.embed(toks, dimensions, keep)
        encoded: list[float] | str = vector
        if body.encoding_format == "base64":
            # float32, little-endian: what OpenAI's client decodes (numpy's native order on x86 and ARM).
            encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"index": i, "object": "embedding", "embedding": encoded})
    prompt_tokens = sum(len(t) for t in tokens)
    usage = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens,
        "completion_tokens": 0,
        "completion_tokens_details": None,
    }
    return JSONResponse(
        {
            "id": request_id,
            "object": "list",
            "created": int(time.time()),
            "model": served.name,
            "data": data,
            "usage": usage,
        }
    )
