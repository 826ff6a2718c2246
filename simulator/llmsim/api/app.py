"""The ASGI app: routes, OpenAI-shaped error handlers, and the arrival stamp."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from llmsim import __version__
from llmsim.api import routes
from llmsim.api.errors import APIError, api_error_handler
from llmsim.api.state import ApiState

Hook = Callable[[], Awaitable[None]]


class ArrivalStamp:
    """Outermost middleware: stamps each request's arrival on the engine clock, as early as we can.

    Token deadlines are computed from this stamp, so request handling before the engine (shorter
    than TTFT) is absorbed instead of being added to the simulated latency.
    """

    def __init__(self, app: ASGIApp, now: Callable[[], float]) -> None:
        self.app = app
        self.now = now

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope["llmsim.arrival"] = self.now()
        await self.app(scope, receive, send)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    err = APIError(exc.status_code, str(exc.detail))
    return err.response()


def create_app(state: ApiState, *, on_startup: Hook | None = None, on_shutdown: Hook | None = None) -> FastAPI:
    """Build the app. ``on_startup``/``on_shutdown`` start and stop the engines (runtime.py)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if on_startup is not None:
            await on_startup()
        try:
            yield
        finally:
            if on_shutdown is not None:
                await on_shutdown()

    app = FastAPI(title="llmsim", version=__version__, lifespan=lifespan, docs_url="/docs", redoc_url=None)
    app.state.llmsim = state
    app.add_exception_handler(APIError, api_error_handler)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_route("/v1/chat/completions", routes.chat_completions, methods=["POST"])
    app.add_route("/v1/completions", routes.completions, methods=["POST"])
    app.add_route("/v1/models", routes.list_models, methods=["GET"])
    app.add_route("/health", routes.health, methods=["GET"])
    app.add_route("/ping", routes.health, methods=["GET", "POST"])
    app.add_route("/version", _version, methods=["GET"])
    app.add_route("/load", _load_route(state), methods=["GET"])
    app.add_middleware(ArrivalStamp, now=state.clock.now)
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
