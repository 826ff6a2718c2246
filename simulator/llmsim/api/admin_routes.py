"""Control endpoints: ``GET/PUT /admin/faults`` and vLLM's ``/sleep``, ``/wake_up``, ``/is_sleeping``.

Guarded by the admin key (``/is_sleeping`` excepted, as it only reads): see :mod:`.access`.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmsim.api import json_body
from llmsim.api.errors import APIError, model_not_found
from llmsim.api.state import ApiState
from llmsim.config.schema import Faults
from llmsim.errors import format_loc


def _state(request: Request) -> ApiState:
    state: ApiState = request.app.state.llmsim
    return state


def _faults_json(state: ApiState) -> dict[str, Any]:
    return {name: served.faults.settings.model_dump(mode="json") for name, served in state.models.items()}


async def faults(request: Request) -> Response:
    """GET: every model's fault settings. PUT ``{model: faults entry}``: replace those models' settings.

    A PUT is all or nothing: every entry is checked before any is applied. Each model named gets
    exactly the entry given (fields left out take their defaults, so ``{}`` turns faults off) and
    its request count restarts, so the draws that follow are reproducible.
    """
    state = _state(request)
    if request.method == "PUT":
        body = json_body.loads(await request.body())
        if not isinstance(body, dict):
            raise APIError(400, "expected a JSON object keyed by model name")
        updates: dict[str, Faults] = {}
        for model, entry in body.items():
            if model not in state.models:
                raise model_not_found(model)
            try:
                updates[model] = Faults.model_validate(entry)
            except ValidationError as exc:
                err = exc.errors(include_url=False)[0]
                field = format_loc(err["loc"])
                message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
                param = f"{model}.{field}" if field else model
                raise APIError(400, f"{param}: {message}", param=param) from None
        for model, settings in updates.items():
            state.models[model].faults.configure(settings)
    return JSONResponse(_faults_json(state))


def _int_query(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise APIError(400, f"{name} must be an integer, got {value!r}.", param=name) from None


async def sleep(request: Request) -> Response:
    """vLLM's ``POST /sleep?level=1&mode=abort``: ``{"status": "sleeping", "level": level}``."""
    level = _int_query(request, "level", 1)
    mode = request.query_params.get("mode", "abort")
    await _state(request).lifecycle.sleep(level, mode)
    return JSONResponse({"status": "sleeping", "level": level})


async def wake_up(request: Request) -> Response:
    """vLLM's ``POST /wake_up[?tags=weights&tags=kv_cache]``: ``{"status": "awake"|"sleeping", "tags": ...}``."""
    tags: list[str] | None = request.query_params.getlist("tags") or None
    fully_awake = _state(request).lifecycle.wake_up(tags)
    return JSONResponse({"status": "awake" if fully_awake else "sleeping", "tags": tags})


async def is_sleeping(request: Request) -> Response:
    return JSONResponse({"is_sleeping": bool(_state(request).lifecycle.sleeping)})
