"""Control endpoints: ``GET/PUT /admin/faults``, ``/admin/timeline`` (fault timelines) and vLLM's ``/sleep``, ``/wake_up``, ``/is_sleeping``.

Guarded by the admin key (``/is_sleeping`` excepted, as it only reads): see :mod:`.access`.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmsim.api import json_body
from llmsim.api.errors import APIError, model_not_found
from llmsim.api.fault_timeline import Replica, TimelineRunner, affected
from llmsim.api.response_models import TimelineStart
from llmsim.api.state import ApiState
from llmsim.config.schema import FaultState, FaultTimeline
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
        updates: dict[str, FaultState] = {}
        for model, entry in body.items():
            if model not in state.models:
                raise model_not_found(model)
            try:
                updates[model] = FaultState.model_validate(entry)
            except ValidationError as exc:
                raise _bad_entry(exc, model) from None
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


def _timelines(state: ApiState) -> dict[str, TimelineRunner]:
    return {name: served.timeline for name, served in state.models.items() if served.timeline is not None}


def _bad_entry(exc: ValidationError, model: str) -> APIError:
    err = exc.errors(include_url=False)[0]
    field = format_loc(err["loc"])
    message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
    param = f"{model}.{field}" if field else model
    return APIError(400, f"{param}: {message}", param=param)


async def timeline(request: Request) -> Response:
    """GET: every model's fault timeline, this replica's place in it and its per-phase counts.

    PUT ``{model: timeline entry | null}``: replace those models' timelines (all or nothing). A
    timeline with ``start: process`` starts at once; ``start: admin`` waits for the start call.
    """
    state = _state(request)
    runners = _timelines(state)
    if request.method == "PUT":
        body = json_body.loads(await request.body())
        if not isinstance(body, dict):
            raise APIError(400, "expected a JSON object keyed by model name")
        updates: dict[str, FaultTimeline | None] = {}
        for model, entry in body.items():
            if model not in runners:
                raise model_not_found(model)
            try:
                updates[model] = None if entry is None else FaultTimeline.model_validate(entry)
            except ValidationError as exc:
                raise _bad_entry(exc, model) from None
            spec = updates[model]
            if spec is not None and spec.start == "process":
                _check_replica(spec, runners[model].replica, model)
        for model, spec in updates.items():
            runners[model].set_timeline(spec)
    return JSONResponse({name: runner.to_json() for name, runner in runners.items()})


def _check_replica(spec: FaultTimeline, replica: Replica, model: str) -> None:
    """A 400 when a phase needs an ordinal or a fleet size this replica does not know."""
    for index, phase in enumerate(spec.phases):
        try:
            affected(phase, index, spec.seed, replica)
        except ValueError as exc:
            raise APIError(400, f"{model}: {exc}", param=model) from None


async def timeline_start(request: Request) -> Response:
    """POST: time 0 of every model's timeline is now; the body may say which replica this is."""
    state = _state(request)
    raw = await request.body()
    body: dict[str, Any] = {}
    if raw.strip():
        loaded = json_body.loads(raw)
        if not isinstance(loaded, dict):
            raise APIError(400, 'expected a JSON object: {"ordinal": 0, "replicas": 3}')
        body = loaded
    try:
        start = TimelineStart.model_validate(body)
    except ValidationError as exc:
        raise _bad_entry(exc, "body") from None
    if (start.ordinal is not None and start.ordinal < 0) or (start.replicas is not None and start.replicas < 1):
        raise APIError(400, "ordinal must be at least 0 and replicas at least 1", param="ordinal")
    given = Replica(start.ordinal, start.replicas)
    runners = _timelines(state)
    for model, runner in runners.items():
        if runner.timeline is not None:
            merged = Replica(
                given.ordinal if given.ordinal is not None else runner.replica.ordinal,
                given.count if given.count is not None else runner.replica.count,
            )
            _check_replica(runner.timeline, merged, model)
    for runner in runners.values():
        runner.start(given)
    return JSONResponse({name: runner.to_json() for name, runner in runners.items()})


async def timeline_requests(request: Request) -> Response:
    """GET: each model's recorded requests since the start: seconds from it, and the fault each got."""
    return JSONResponse({name: runner.requests_json() for name, runner in _timelines(_state(request)).items()})
