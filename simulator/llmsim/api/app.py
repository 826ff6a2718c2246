"""The ASGI app: routes, OpenAI-shaped error handlers, the arrival stamp, and the fast path of the hot routes."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Match, Route
from starlette.types import Message, Receive, Scope, Send

from llmsim import __version__
from llmsim.api import admin_routes, messages_routes, responses_routes, router_routes, routes
from llmsim.api.access import Access
from llmsim.api.errors import APIError, api_error_handler, request_too_large
from llmsim.api.identity import Identity, with_headers
from llmsim.api.lifecycle import Lifecycle
from llmsim.api.openapi import add_request_schemas, request_body, responses
from llmsim.api.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    GenerateRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
)
from llmsim.api.response_models import (
    ChatCompletionChunk,
    ChatCompletionResponse,
    CompletionChunk,
    CompletionResponse,
    DetokenizeResponse,
    EmbeddingResponse,
    FaultSettings,
    GenerateResponse,
    GenerateStreamResponse,
    GetLoadResponse,
    IsSleepingResponse,
    LoadResponse,
    LoadsResponse,
    MessagesCountTokensResponse,
    MessagesResponse,
    MessagesStreamEvent,
    ModelInfo,
    ModelList,
    RenderedPrompt,
    RenderedPrompts,
    ResponsesResponse,
    ResponsesStreamEvent,
    ServerInfo,
    SleepResponse,
    TimelineSettings,
    TimelineStart,
    TokenizeResponse,
    VersionResponse,
    WakeUpResponse,
)
from llmsim.api.state import ApiState
from llmsim.engine.release_gate import ReleaseGate
from llmsim.transport import ARRIVAL_KEY, quiet_dropped_connections

logger = logging.getLogger("llmsim.api")

Hook = Callable[[], Awaitable[None]]
Endpoint = Callable[[Request], Awaitable[Response]]


# What the metrics pages (metrics/hub.py) answer, for /openapi.json: status and content type.
_PAGE_ANSWERS: dict[tuple[str, str], tuple[int, str | None]] = {
    ("/metrics", "GET"): (200, "text/plain"),
    ("/metrics/summary", "GET"): (200, "application/json"),
    ("/metrics/summary", "DELETE"): (204, None),
    ("/reset_prefix_cache", "POST"): (200, "application/json"),
}


class LlmsimApp(FastAPI):
    """FastAPI, with the arrival stamp and the generation routes in front of its middleware.

    The arrival stamp is taken first thing, before any middleware: token deadlines are computed
    from it, so request handling before the engine (shorter than TTFT) is absorbed instead of
    being added to the simulated latency.

    ``POST /v1/chat/completions``, ``POST /v1/completions`` and ``POST /inference/v1/generate``
    (the ``hot`` endpoints) skip routing and FastAPI's own middleware (each layer wraps ``send``, a
    coroutine hop per streamed token) and get the server's own ``send``; errors are answered as the stack would (OpenAI-shaped APIError, else a plain 500).
    Every other request, and these paths with other methods (405), go through FastAPI.

    With ``fast_path`` False (``llmsim serve --no-fast-path``) they go through the stack too.

    NOTE: the shortcut holds only while nobody added middleware (``add_middleware`` or
    ``@app.middleware``): from then on every request goes through the stack, so a middleware can
    never silently miss the completion routes.

    What must apply to every request, fast path included, is done here, once per request and
    never per token: API and admin keys (:mod:`.access`: a refused request gets its 401 before
    any route), the identity headers (:mod:`.identity`: added to the fast path's response
    object, through a ``send`` wrapper on the other routes), and the count of generation
    requests in flight that a shutdown drains (:mod:`.lifecycle`).
    """

    def __init__(
        self,
        *,
        now: Callable[[], float],
        hot: Mapping[str, Endpoint],
        max_request_bytes: int,
        access: Access | None = None,
        identity: Identity | None = None,
        lifecycle: Lifecycle | None = None,
        gate: ReleaseGate | None = None,
        fast_path: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._fast_path = fast_path
        self._now = now
        # The engines' pending releases: a request's work waits while one is at hand.
        self._gate = gate
        self._hot = dict(hot)
        self._access = access or Access()
        self._identity = identity or Identity()
        self._lifecycle = lifecycle or Lifecycle(now)
        self._max_request_bytes = max_request_bytes
        self._request_models: list[type[BaseModel]] = []

    def add_json_route(
        self,
        path: str,
        endpoint: Endpoint,
        body: Sequence[type[BaseModel]],
        response: type[BaseModel] | None,
        *,
        errors: Sequence[int] = (400, 404),
        stream: type[BaseModel] | None = None,
        summary: str | None = None,
        method: str = "POST",
        response_class: type[Response] = JSONResponse,
    ) -> None:
        """A route whose endpoint parses its own JSON body (one of ``body``), documented in /openapi.json.

        ``stream``: the chunk model of its ``stream: true`` answer (an SSE stream).
        ``response_class``: the kind of its answer (``PlainTextResponse``: the documented 200 is text).
        """
        self._request_models.extend(body)
        if stream is not None:
            self._request_models.append(stream)
        self.add_api_route(
            path,
            endpoint,
            methods=[method],
            name=f"{path.strip('/').replace('/', '_')}_{method.lower()}",
            summary=summary,
            openapi_extra=request_body(*body),
            responses=responses(response, errors=errors, stream=stream),
            response_class=response_class,
        )

    def add_page_routes(self, pages: Sequence[Route]) -> None:
        """Routes of other layers (the metrics pages), listed in /openapi.json: one operation per method."""
        for page in pages:
            for method in sorted((page.methods or set()) - {"HEAD"}):
                status, media_type = _PAGE_ANSWERS.get((page.path, method), (200, None))
                answer: dict[str, Any] = {"description": "OK" if status == 200 else "Done, no content"}
                if media_type is not None:
                    answer["content"] = {media_type: {}}
                self.add_api_route(
                    page.path,
                    page.endpoint,
                    methods=[method],
                    name=f"{page.path.strip('/').replace('/', '_')}_{method.lower()}",
                    description=page.endpoint.__doc__,
                    response_class=Response,
                    status_code=status,
                    responses={status: answer},
                )

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            document = super().openapi()
            add_request_schemas(document, self._request_models)
            self.openapi_schema = document
        return self.openapi_schema

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        if ARRIVAL_KEY not in scope:  # stamped by uvicorn's protocol when llmsim serve runs it
            scope[ARRIVAL_KEY] = self._now()
        gate = self._gate
        if gate is not None:
            # Before the request's first slice of work (parsing, planning, submitting): a token
            # release about to be due goes first. The arrival is stamped already.
            await gate.give_way(scope[ARRIVAL_KEY])
        headers = self._identity.headers(scope)
        if self._access.enabled:
            refusal = self._access.refusal(scope)
            if refusal is not None:
                refusal.raw_headers.extend(headers)
                await refusal(scope, receive, send)
                return
        if scope["method"] in _BODY_METHODS:
            limit = self._max_request_bytes
            if _declared_length(scope) > limit:
                # Refused before a byte of the body is read.
                too_large = request_too_large(limit).response()
                too_large.raw_headers.extend(headers)
                await too_large(scope, receive, send)
                return
            receive = _capped(receive, limit)
        endpoint = self._hot.get(scope["path"])
        if endpoint is None:
            await super().__call__(scope, receive, with_headers(send, headers))
            return
        lifecycle = self._lifecycle
        lifecycle.started()
        try:
            if (
                scope["method"] == "POST"
                and self._fast_path
                and not scope.get("root_path")
                and not self.user_middleware
            ):
                await self._serve(endpoint, scope, receive, send, headers)
            else:
                await super().__call__(scope, receive, with_headers(send, headers))
        finally:
            lifecycle.finished()

    async def _serve(
        self, endpoint: Endpoint, scope: Scope, receive: Receive, send: Send, headers: list[tuple[bytes, bytes]]
    ) -> None:
        scope["app"] = self
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except APIError as exc:
            response = await api_error_handler(request, exc)
        except ClientDisconnect as exc:
            response = await _client_left(request, exc)
        except Exception:
            # As Starlette's ServerErrorMiddleware without debug: a plain 500, then re-raise for the server's log.
            error = PlainTextResponse("Internal Server Error", status_code=500)
            error.raw_headers.extend(headers)
            await error(scope, receive, send)
            raise
        response.raw_headers.extend(headers)
        gate = self._gate
        if gate is not None:
            # Admitted (or refused): the response's start is the request's second slice of work.
            await gate.give_way()
        await response(scope, receive, send)


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _declared_length(scope: Scope) -> int:
    """The Content-Length header's value (0 when absent or unreadable: the body is then counted as it comes)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


def _capped(receive: Receive, limit: int) -> Receive:
    """``receive``, refusing (413) a body that grows past ``limit`` bytes without a Content-Length saying so."""
    seen = 0

    async def capped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise request_too_large(limit)
        return message

    return capped


async def _client_left(request: Request, exc: Exception) -> Response:
    """The client went away before its body was whole: its own doing, not the server's error."""
    logger.debug("client left before its request body was read: %s %s", request.method, request.url.path)
    # Nobody reads it (the server drops it); 499 as the routes answer a client gone while waiting.
    return Response(status_code=499)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers) if exc.headers else None
    if exc.status_code == 405:
        # RFC 9110: Allow lists every method the path serves. Starlette's names only the first
        # route that matched the path, and a path may have one route per method (/ping).
        headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request.app, request.scope))}
    return APIError(exc.status_code, str(exc.detail), headers=headers).response()


def allowed_methods(app: Starlette, scope: Scope) -> list[str]:
    """Every method some route of ``app`` serves at ``scope``'s path, in a fixed order."""
    methods: set[str] = set()
    for route in app.router.routes:
        if isinstance(route, Route) and route.methods is not None:
            match, _ = route.matches({**scope, "method": next(iter(route.methods))})
            if match is Match.FULL:
                methods |= route.methods
    return sorted(methods)


def create_app(
    state: ApiState,
    *,
    on_startup: Hook | None = None,
    on_shutdown: Hook | None = None,
    access: Access | None = None,
    identity: Identity | None = None,
    fast_path: bool = True,
) -> LlmsimApp:
    """Build the app. ``on_startup``/``on_shutdown`` start and stop the engines (runtime.py)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        quiet_dropped_connections()  # after the server set up its logging
        state.lifecycle.start()
        if on_startup is not None:
            await on_startup()
        try:
            yield
        finally:
            if on_shutdown is not None:
                await on_shutdown()

    hot = {
        "/v1/chat/completions": routes.chat_completions,
        "/v1/completions": routes.completions,
        # Not for speed: the fast path counts the requests in flight that a shutdown drains.
        "/inference/v1/generate": router_routes.generate,
        "/v1/messages": messages_routes.messages,
        "/v1/responses": responses_routes.responses,
    }
    app = LlmsimApp(
        now=state.clock.now,
        hot=hot,
        max_request_bytes=state.max_request_bytes,
        title="llmsim",
        version=__version__,
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        access=access,
        identity=identity,
        gate=state.release_gate,
        lifecycle=state.lifecycle,
        fast_path=fast_path,
    )
    app.state.llmsim = state
    app.add_exception_handler(APIError, api_error_handler)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(ClientDisconnect, _client_left)
    # Also routed here: the same endpoints when the fast path does not apply (middleware, another method: 405).
    app.add_json_route(
        "/v1/chat/completions",
        routes.chat_completions,
        [ChatCompletionRequest],
        ChatCompletionResponse,
        errors=(400, 404, 503),
        stream=ChatCompletionChunk,
        summary="Chat completion (OpenAI)",
    )
    app.add_json_route(
        "/v1/completions",
        routes.completions,
        [CompletionRequest],
        CompletionResponse,
        errors=(400, 404, 503),
        stream=CompletionChunk,
        summary="Text completion (OpenAI)",
    )
    app.add_json_route(
        "/v1/messages",
        messages_routes.messages,
        [messages_routes.MessagesRequest],
        MessagesResponse,
        errors=(400, 404, 503),
        stream=MessagesStreamEvent,
        summary="Messages (Anthropic), served by the chat path (vLLM)",
    )
    app.add_json_route(
        "/v1/messages/count_tokens",
        messages_routes.count_tokens,
        [messages_routes.MessagesCountTokensRequest],
        MessagesCountTokensResponse,
        summary="Tokens a Messages conversation takes (Anthropic, vLLM)",
    )
    app.add_json_route(
        "/v1/responses",
        responses_routes.responses,
        [responses_routes.ResponsesRequest],
        ResponsesResponse,
        errors=(400, 404, 503),
        stream=ResponsesStreamEvent,
        summary="Responses (OpenAI), served by the chat path (vLLM)",
    )
    app.add_json_route(
        "/v1/embeddings",
        routes.embeddings,
        [EmbeddingRequest],
        EmbeddingResponse,
        errors=(400, 404, 503),
        summary="Embeddings (OpenAI), for models configured with `embeddings`",
    )
    app.add_json_route(
        "/tokenize",
        routes.tokenize,
        [TokenizeCompletionRequest, TokenizeChatRequest],
        TokenizeResponse,
        summary="Token ids of a prompt or of chat messages (vLLM)",
    )
    app.add_json_route(
        "/detokenize", routes.detokenize, [DetokenizeRequest], DetokenizeResponse, summary="Text of token ids (vLLM)"
    )
    app.add_json_route(
        "/v1/chat/completions/render",
        router_routes.render_chat,
        [ChatCompletionRequest],
        RenderedPrompt,
        summary="A chat request's prompt token ids, as a generate body (vLLM)",
    )
    app.add_json_route(
        "/v1/completions/render",
        router_routes.render_completion,
        [CompletionRequest],
        RenderedPrompts,
        summary="A completions request's prompts' token ids, as generate bodies (vLLM)",
    )
    app.add_json_route(
        "/inference/v1/generate",
        router_routes.generate,
        [GenerateRequest],
        GenerateResponse,
        errors=(400, 404, 503),
        stream=GenerateStreamResponse,
        summary="Token ids in, token ids out (vLLM)",
    )
    app.add_api_route("/get_load", router_routes.get_load, methods=["GET"], responses=responses(GetLoadResponse))
    app.add_api_route("/server_info", router_routes.server_info, methods=["GET"], responses=responses(ServerInfo))
    app.add_api_route("/model_info", router_routes.model_info, methods=["GET"], responses=responses(ModelInfo))
    app.add_api_route("/v1/models", routes.list_models, methods=["GET"], responses=responses(ModelList))
    health = responses(None, description="Serving (empty body)")
    # response_class Response: no body, so no content type is documented.
    app.add_api_route("/health", routes.health, methods=["GET"], responses=health, response_class=Response)
    # Readiness paths of llm-d-inference-sim (/ready) and of its users' probes (/health/ready),
    # answering as /health does.
    for path in ("/ready", "/health/ready"):
        app.add_api_route(path, routes.health, methods=["GET"], responses=health, response_class=Response)
    # Two routes, as vLLM registers them (one OpenAPI operation each).
    for method in ("GET", "POST"):
        app.add_api_route(
            "/ping", routes.ping, methods=[method], responses=health, name="ping", response_class=Response
        )
    # Control endpoints (guarded by the admin key when one is set).
    app.add_api_route(
        "/admin/faults",
        admin_routes.faults,
        methods=["GET"],
        responses=responses(FaultSettings),
        summary="Every model's fault injection",
    )
    app.add_json_route(
        "/admin/faults",
        admin_routes.faults,
        [FaultSettings],
        FaultSettings,
        method="PUT",
        summary="Replace some models' fault injection (all or nothing)",
    )
    app.add_api_route(
        "/admin/timeline",
        admin_routes.timeline,
        methods=["GET"],
        summary="Every model's fault timeline, this replica's phase and per-phase counts",
    )
    app.add_json_route(
        "/admin/timeline",
        admin_routes.timeline,
        [TimelineSettings],
        None,
        method="PUT",
        summary="Replace some models' fault timelines (all or nothing)",
    )
    app.add_json_route(
        "/admin/timeline/start",
        admin_routes.timeline_start,
        [TimelineStart],
        None,
        summary="Start every model's fault timeline now (optionally saying which replica this is)",
    )
    app.add_api_route(
        "/admin/timeline/requests",
        admin_routes.timeline_requests,
        methods=["GET"],
        summary="Each request since the timeline's start: its time and its fault",
    )
    sleep_query = [
        {"name": "level", "in": "query", "schema": {"type": "integer", "enum": [0, 1, 2], "default": 1}},
        {"name": "mode", "in": "query", "schema": {"type": "string", "enum": ["abort", "wait"], "default": "abort"}},
    ]
    app.add_api_route(
        "/sleep",
        admin_routes.sleep,
        methods=["POST"],
        responses=responses(SleepResponse, errors=(400,)),
        openapi_extra={"parameters": sleep_query},
        summary="Put the model to sleep (vLLM)",
    )
    wake_query = [{"name": "tags", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}}]
    app.add_api_route(
        "/wake_up",
        admin_routes.wake_up,
        methods=["POST"],
        responses=responses(WakeUpResponse, errors=(400,)),
        openapi_extra={"parameters": wake_query},
        summary="Wake the model up, or some of its parts (vLLM)",
    )
    app.add_api_route(
        "/is_sleeping", admin_routes.is_sleeping, methods=["GET"], responses=responses(IsSleepingResponse)
    )
    app.add_api_route("/version", _version, methods=["GET"], responses=responses(VersionResponse))
    app.add_api_route("/load", _load_route(state), methods=["GET"], responses=responses(LoadResponse))
    app.add_api_route("/v1/loads", router_routes.loads, methods=["GET"], responses=responses(LoadsResponse))
    return app


async def _version(request: Request) -> Response:
    return Response(json.dumps({"version": __version__}), media_type="application/json")


def _load_route(state: ApiState) -> Callable[[Request], Awaitable[Response]]:
    async def load(request: Request) -> Response:
        # vLLM's /load: requests in flight (running + waiting) across the server.
        n = 0
        for m in state.models.values():
            snap = m.engine.snapshot()
            n += snap.num_running + snap.num_waiting
        return Response(json.dumps({"server_load": n}), media_type="application/json")

    return load
