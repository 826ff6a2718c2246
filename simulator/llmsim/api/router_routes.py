"""The routes routers call besides completions: vLLM's render and token-in/token-out routes, the load
polled by power_of_two policies, and SGLang's server and model info.

``/v1/chat/completions/render`` and ``/v1/completions/render`` (vllm-router's cache_aware policy,
llm-d's token producer) answer the prompt's token ids from the same tokenizer and chat template
the generator uses, so a router hashes the ids the replica's prefix cache hashes.
``/inference/v1/generate`` takes token ids and answers token ids, through the same generator,
faults, engine and metrics as ``/v1/completions``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmsim import __version__
from llmsim.api.choice_events import merged_events
from llmsim.api.completion_bodies import dumps_compact
from llmsim.api.errors import APIError
from llmsim.api.identity import SCOPE_CLIENT_REQUEST_ID, SCOPE_REQUEST_ID
from llmsim.api.protocol import ChatCompletionRequest, CompletionRequest, GenerateRequest, RequestInvalid
from llmsim.api.routes import (
    SSE_HEADERS,
    _arrival,
    _check,
    _complete,
    _fault,
    _log_ignored,
    _plan,
    _served,
    _served_or_first,
    _state,
    _submit,
    _until_disconnect,
    _until_serving,
    _with_lora,
    bad_request,
    parse_body,
)
from llmsim.api.served import ServedModel
from llmsim.engine.errors import EngineStopped, RequestAborted
from llmsim.transport import DropConnection, DroppedResponse, DroppingEvents, EventSource, SSEResponse
from llmsim.types import GenerationPlan, GenerationRequest, RequestId, TokenEvent

DONE = b"data: [DONE]\n\n"


#: SGLang's ``disaggregation_mode`` for each of vLLM's KV roles (``null``: not disaggregated).
_DISAGGREGATION_MODE = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "null"}


def _sampling_params(
    body: ChatCompletionRequest | CompletionRequest, request: GenerationRequest, prompt_tokens: int, context: int
) -> dict[str, Any]:
    """The request's sampling parameters as a generate body carries them (vLLM's defaults where unset)."""
    max_tokens = request.max_tokens if request.max_tokens is not None else context - prompt_tokens
    return {
        "n": body.n,
        "max_tokens": max_tokens,
        "min_tokens": body.min_tokens,
        "seed": body.seed,
        "stop": list(body.stop_tuple()),
        "ignore_eos": body.ignore_eos,
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "top_p": 1.0 if body.top_p is None else body.top_p,
        "top_k": 0 if body.top_k is None else body.top_k,
        "min_p": 0.0 if body.min_p is None else body.min_p,
        "presence_penalty": body.presence_penalty or 0.0,
        "frequency_penalty": body.frequency_penalty or 0.0,
        "repetition_penalty": 1.0 if body.repetition_penalty is None else body.repetition_penalty,
        "logprobs": body.num_logprobs,
    }


def _rendered(
    body: ChatCompletionRequest | CompletionRequest, served: ServedModel, request: GenerationRequest, *, chat: bool
) -> dict[str, Any]:
    ids = served.generator.prompt_token_ids(request)
    if len(ids) > served.context_length:
        raise APIError(
            400,
            f"This model's maximum context length is {served.context_length} tokens. However, your prompt "
            f"contains {len(ids)} input tokens, which exceeds this limit even without any output tokens. "
            "Please reduce the length of the input prompt.",
            param="input_tokens",
        )
    extra = body.model_extra or {}
    salt, priority = extra.get("cache_salt"), extra.get("priority")
    return {
        # vLLM: a new id per rendered prompt, as its chat and completions routes name theirs.
        "request_id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
        "token_ids": list(ids),
        "features": None,
        "sampling_params": _sampling_params(body, request, len(ids), served.context_length),
        "model": body.model,
        "stream": body.stream,
        "stream_options": body.stream_options.model_dump() if body.stream and body.stream_options else None,
        "cache_salt": salt if isinstance(salt, str) else None,
        "priority": priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        # NOTE: not carried over, as vLLM renders it: a router adds its own to the generate body.
        "kv_transfer_params": None,
    }


async def render_chat(request: Request) -> Response:
    """vLLM's ``POST /v1/chat/completions/render``: the generate body of a chat request (its prompt's token ids)."""
    state = _state(request)
    body = await parse_body(request, ChatCompletionRequest)
    served = _served(state, body.model)
    _check(body, served)
    try:
        gen_request = body.to_generation_request()
    except ValueError as exc:
        raise APIError(400, str(exc), param="messages") from None
    (gen_request,) = _with_lora([gen_request], served, body.model)
    return JSONResponse(_rendered(body, served, gen_request, chat=True))


async def render_completion(request: Request) -> Response:
    """vLLM's ``POST /v1/completions/render``: one generate body per prompt."""
    state = _state(request)
    body = await parse_body(request, CompletionRequest)
    served = _served(state, body.model)
    _check(body, served)
    requests = _with_lora(body.to_generation_requests(), served, body.model)
    return JSONResponse([_rendered(body, served, r, chat=False) for r in requests])


def _generate_id(request: Request, body: GenerateRequest) -> str:
    # vLLM: the client's X-Request-Id, else the body's request_id, else a random one.
    scope = request.scope
    if scope.get(SCOPE_CLIENT_REQUEST_ID):
        base = str(scope.get(SCOPE_REQUEST_ID))
    else:
        base = body.request_id or uuid.uuid4().hex
    return f"generate-tokens-{base}"


def _output_ids(served: ServedModel, plan: GenerationPlan) -> tuple[int, ...]:
    if plan.token_ids is not None:
        return plan.token_ids
    return served.generator.tokenizer.ids_of_tokens(plan.tokens)


def _usage(prompt_tokens: int, completion_tokens: int, cached: int | None) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


async def generate(request: Request) -> Response:
    """vLLM's ``POST /inference/v1/generate``: token ids in, token ids out, streamed or not."""
    state = _state(request)
    arrival = _arrival(request, state)
    body = await parse_body(request, GenerateRequest)
    served = _served_or_first(state, body.model)
    try:
        body.check(vocab_size=served.generator.vocab_size)
    except RequestInvalid as exc:
        raise bad_request(exc) from None
    _log_ignored(body)
    if not state.lifecycle.serving:
        admitted = await _until_serving(request, state, arrival)
        if admitted is None:
            return Response(status_code=499)
        arrival = admitted
    fault = _fault(request, served, arrival)
    model = body.model or served.name
    requests = _with_lora([body.to_generation_request(model)], served, model)
    plans = await _plan(request, served, requests)
    request_id = _generate_id(request, body)
    ids = [RequestId(f"{request_id}-{i}") for i in range(len(plans))]
    outputs = [_output_ids(served, p) for p in plans]
    prompt_tokens = plans[0].prompt_tokens
    details = served.enable_prompt_tokens_details
    drop_after: int | None = None
    if fault is not None:
        plans = fault.pace(plans)
        drop_after = fault.drop_after(plans)
        fault.log_where(plans, request_id)
    if body.stream:
        streams = await _submit(served, plans, arrival, ids)
        options = body.stream_options
        stream = GenerateStream(
            request_id,
            plans,
            outputs,
            served,
            state.clock.now,
            prompt_tokens,
            include_usage=options is not None and options.include_usage,
            continuous_usage=options is not None and options.continuous_usage_stats,
            cached=(lambda: streams[0].num_cached_tokens) if details else None,
        )
        events: EventSource[tuple[int, TokenEvent]] = merged_events(streams)
        if drop_after is not None:
            events = DroppingEvents(events, drop_after)
        return SSEResponse(events, stream.encode, stream, headers=SSE_HEADERS, gate=state.release_gate)
    try:
        done = await _until_disconnect(
            _complete(served, plans, arrival, ids, state.clock.now, len(plans), drop_after), request
        )
    except DropConnection:
        return DroppedResponse()
    if done is None:  # the client left; nobody reads this
        return Response(status_code=499)
    texts, aborted, cached = done
    choices = []
    for pos, (plan, said) in enumerate(zip(plans, texts, strict=True)):
        cut = aborted and len(said) < plan.num_output_tokens
        finish = "abort" if cut else plan.finish_reason.value
        choices.append(
            {"index": pos, "logprobs": None, "finish_reason": finish, "token_ids": list(outputs[pos][: len(said)])}
        )
    completion_tokens = sum(len(t) for t in texts)
    return JSONResponse(
        {
            "request_id": request_id,
            "model": model,
            "created": int(time.time()),
            "choices": choices,
            "usage": _usage(prompt_tokens, completion_tokens, cached if details else None),
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }
    )


class GenerateStream:
    """The SSE events of a streamed ``/inference/v1/generate``: one per token, its choice's new id.

    As vLLM: the last token's event carries the finish reason, then the usage (with
    ``include_usage``), then ``[DONE]``.
    """

    def __init__(
        self,
        request_id: str,
        plans: Sequence[GenerationPlan],
        outputs: Sequence[Sequence[int]],
        served: ServedModel,
        now: Callable[[], float],
        prompt_tokens: int,
        *,
        include_usage: bool,
        continuous_usage: bool,
        cached: Callable[[], int] | None = None,
    ) -> None:
        self._request_id = request_id
        self._plans = plans
        self._outputs = outputs
        self._served = served
        self._now = now
        self._prompt_tokens = prompt_tokens
        self._include_usage = include_usage
        self._continuous = continuous_usage
        self._cached = cached
        self._sent = [0] * len(plans)
        self._lags: list[float] = []

    def encode(self, item: tuple[int, TokenEvent]) -> bytes:
        pos, event = item
        self._lags.append(self._now() - event.sim_time)
        self._sent[pos] += 1
        plan = self._plans[pos]
        last = event.index + 1 >= plan.num_output_tokens
        chunk: dict[str, Any] = {
            "request_id": self._request_id,
            "choices": [
                {
                    "index": pos,
                    "logprobs": None,
                    "finish_reason": plan.finish_reason.value if last else None,
                    "token_ids": [self._outputs[pos][event.index]],
                }
            ],
            "usage": _usage(self._prompt_tokens, self._sent[pos], None) if self._continuous else None,
        }
        return b"data: " + dumps_compact(chunk) + b"\n\n"

    def tail(self) -> bytes:
        if not self._include_usage:
            return DONE
        cached = self._cached() if self._cached is not None else None
        usage = _usage(self._prompt_tokens, sum(self._sent), cached)
        return (
            b"data: " + dumps_compact({"request_id": self._request_id, "choices": [], "usage": usage}) + b"\n\n" + DONE
        )

    def error(self, exc: Exception) -> bytes | None:
        if isinstance(exc, RequestAborted):
            return self.tail()
        if not isinstance(exc, EngineStopped):
            return None
        error = {"error": {"message": str(exc), "type": "InternalServerError", "param": None, "code": 500}}
        return b"data: " + dumps_compact(error) + b"\n\n" + DONE

    def close(self) -> None:
        lags, self._lags = self._lags, []
        self._served.observe_lags(lags)


async def get_load(request: Request) -> Response:
    """vllm-router's ``GET /get_load``: ``{"load": n}``, the requests in flight (running + waiting) across the server."""
    n = 0
    for m in _state(request).models.values():
        snap = m.engine.snapshot()
        n += snap.num_running + snap.num_waiting
    return Response(json.dumps({"load": n}), media_type="application/json")


async def loads(request: Request) -> Response:
    """SGLang's ``GET /v1/loads``, which sglang-router's power_of_two polls first: one entry per data-parallel rank.

    A rank's entry adds up every model's engine of that rank. ``dp_rank`` counts the ranks this
    server runs from 0, as the ranks a request may pin (``/server_info``'s ``dp_size`` of them):
    sglang-router matches an entry to the rank it pins by that number. Its
    token load is the KV cache the requests hold (blocks × block size). An engine without a KV
    cache (instant, fixed) reports no token figures, so the router falls back to its own count of
    requests in flight, as it does for a server without the route.
    """
    per_rank: dict[int, dict[str, Any]] = {}
    for m in _state(request).models.values():
        for rank, (_, engine) in enumerate(m.ranks()):
            snap = engine.snapshot()
            entry = per_rank.setdefault(rank, {"dp_rank": rank, "num_running_reqs": 0, "num_waiting_reqs": 0})
            entry["num_running_reqs"] += snap.num_running
            entry["num_waiting_reqs"] += snap.num_waiting
            if m.info.block_size is not None:
                entry["num_total_tokens"] = entry.get("num_total_tokens", 0) + snap.kv_used_blocks * m.info.block_size
    ranks = [per_rank[r] for r in sorted(per_rank)]
    aggregate: dict[str, Any] = {
        "total_running_reqs": sum(e["num_running_reqs"] for e in ranks),
        "total_waiting_reqs": sum(e["num_waiting_reqs"] for e in ranks),
    }
    if any("num_total_tokens" in e for e in ranks):
        aggregate["total_tokens"] = sum(e.get("num_total_tokens", 0) for e in ranks)
    return JSONResponse({"version": __version__, "loads": ranks, "aggregate": aggregate})


def _first(request: Request) -> ServedModel:
    return next(iter(_state(request).models.values()))


async def server_info(request: Request) -> Response:
    """SGLang's ``GET /server_info``: the fields sglang-router reads at startup.

    ``dp_size`` is the ranks this server runs (pinned ranks 0..dp_size-1 are accepted), which
    sglang-router's ``--dp-aware`` spreads requests over with ``data_parallel_rank``.
    """
    served = _first(request)
    return JSONResponse(
        {
            "model_path": served.name,
            "tokenizer_path": served.name,
            "served_model_name": served.name,
            "dp_size": len(served.dp_ranks),
            "tp_size": served.tensor_parallel_size,
            "context_length": served.context_length,
            "disaggregation_mode": _DISAGGREGATION_MODE[served.kv_transfer.role] if served.kv_transfer else "null",
            "is_embedding": False,
            "version": __version__,
        }
    )


async def model_info(request: Request) -> Response:
    """SGLang's ``GET /model_info``."""
    served = _first(request)
    return JSONResponse(
        {
            "model_path": served.name,
            "tokenizer_path": served.name,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": None,
            "architectures": None,
        }
    )
