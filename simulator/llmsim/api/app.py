"""The ASGI app: routes, OpenAI-shaped error handlers, the arrival stamp, and the fast path of the hot routes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from llmsim import __version__
from llmsim.api import admin_routes, routes
from llmsim.api.access import Access
from llmsim.api.dropped_connection import quiet_dropped_connections
from llmsim.api.errors import APIError, api_error_handler
from llmsim.api.identity import Identity, with_headers
from llmsim.api.lifecycle import Lifecycle
from llmsim.api.state import ApiState

Hook = Callable[[], Awaitable[None]]
Endpoint = Callable[[Request], Awaitable[Response]]


class LlmsimApp(FastAPI):
    """FastAPI, with the arrival stamp and the two completion routes in front of its middleware.

    The arrival stamp is taken first thing, before any middleware: token deadlines are computed
    from it, so request handling before the engine (shorter than TTFT) is absorbed instead of
    being added to the simulated latency.

    ``POST /v1/chat/completions`` and ``POST /v1/completions`` skip routing and FastAPI's own
    middleware (each layer wraps ``send``, a coroutine hop per streamed token) and get the server's
    own ``send``; errors are answered as the stack would (OpenAI-shaped APIError, else a plain 500).
    Every other request, and these paths with other methods (405), go through FastAPI.

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
        access: Access | None = None,
        identity: Identity | None = None,
        lifecycle: Lifecycle | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._now = now
        self._hot = dict(hot)
        self._access = access or Access()
        self._identity = identity or Identity()
        self._lifecycle = lifecycle or Lifecycle(now)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        scope["llmsim.arrival"] = self._now()
        headers = self._identity.headers(scope)
        if self._access.enabled:
            refusal = self._access.refusal(scope)
            if refusal is not None:
                refusal.raw_headers.extend(headers)
                await refusal(scope, receive, send)
                return
        endpoint = self._hot.get(scope["path"])
        if endpoint is None:
            await super().__call__(scope, receive, with_headers(send, headers))
            return
        lifecycle = self._lifecycle
        lifecycle.started()
        try:
            if scope["method"] == "POST" and not scope.get("root_path") and not self.user_middleware:
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
        except Exception:
            # As Starlette's ServerErrorMiddleware without debug: a plain 500, then re-raise for the server's log.
            error = PlainTextResponse("Internal Server Error", status_code=500)
            error.raw_headers.extend(headers)
            await error(scope, receive, send)
            raise
        response.raw_headers.extend(headers)
        await response(scope, receive, send)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    err = APIError(exc.status_code, str(exc.detail))
    return err.response()


def create_app(
    state: ApiState,
    *,
    on_startup: Hook | None = None,
    on_shutdown: Hook | None = None,
    access: Access | None = None,
    identity: Identity | None = None,
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

    hot = {"/v1/chat/completions": routes.chat_completions, "/v1/completions": routes.completions}
    app = LlmsimApp(
        now=state.clock.now,
        hot=hot,
        title="llmsim",
        version=__version__,
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        access=access,
        identity=identity,
        lifecycle=state.lifecycle,
    )
    app.state.llmsim = state
    app.add_exception_handler(APIError, api_error_handler)
    app.add_exception_handler(HTTPException, _http_error)
    # Also routed here: the same endpoints when the fast path does not apply (another method: 405).
    for path, endpoint in hot.items():
        app.add_route(path, endpoint, methods=["POST"])
    app.add_route("/v1/models", routes.list_models, methods=["GET"])
    app.add_route("/health", routes.health, methods=["GET"])
    app.add_route("/ping", routes.ping, methods=["GET", "POST"])
    app.router.routes.extend(admin_routes.routes())
    app.add_route("/version", _version, methods=["GET"])
    app.add_route("/load", _load_route(state), methods=["GET"])
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
