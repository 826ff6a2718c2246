"""vLLM's runtime LoRA endpoints: ``POST /v1/load_lora_adapter`` and ``POST /v1/unload_lora_adapter``.

Served only when ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` is ``1`` or ``true`` (vLLM's switch; runtime.py
adds the routes), with vLLM 0.34's request bodies, plain-text success answers and error texts
(``vllm/entrypoints/openai/models/serving.py``).

NOTE: vLLM attaches a runtime-loaded adapter to its first base model; llmsim to the first model
with a ``lora`` section (LoRA enabled). vLLM reads the adapter's files and answers 404 when they
are missing; llmsim has no files to read, so any path loads (the path still enters the block hash).

Bounded, as reading real files bounds vLLM: a name of at most :data:`MAX_NAME_CHARS` characters,
a path of at most :data:`MAX_PATH_CHARS` (Linux's ``PATH_MAX``), and at most ``max_cpu_loras``
adapters loaded at runtime on a model, besides its startup ones (400 past it: unload one first).
vLLM evicts past ``max_cpu_loras`` and reloads from disk; it lists only adapters whose files
exist, where llmsim, reading none, would list any number. Both routes take the admin key
(:mod:`.access`).
"""

from __future__ import annotations

import os
from typing import Annotated

from pydantic import BaseModel, Field, ValidationError
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from llmsim.api import json_body
from llmsim.api.errors import APIError, echoed, from_validation_error
from llmsim.api.served import ServedModel
from llmsim.api.state import ApiState

__all__ = ["ENV_SWITCH", "LORA_BODIES", "MAX_NAME_CHARS", "MAX_PATH_CHARS", "lora_routes", "runtime_lora_updating"]

#: vLLM's environment switch for the two routes.
ENV_SWITCH = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


def runtime_lora_updating() -> bool:
    """Whether the switch is on (``1`` or ``true``, any case), as vLLM reads it."""
    return os.environ.get(ENV_SWITCH, "0").strip().lower() in ("1", "true")


#: The longest adapter name and path a load accepts.
MAX_NAME_CHARS = 256
MAX_PATH_CHARS = 4096


class LoadLoRAAdapterRequest(BaseModel):
    lora_name: Annotated[str, Field(max_length=MAX_NAME_CHARS)]
    lora_path: Annotated[str, Field(max_length=MAX_PATH_CHARS)]
    load_inplace: bool = False
    is_3d_lora_weight: bool = False


class UnloadLoRAAdapterRequest(BaseModel):
    lora_name: str
    lora_int_id: int | None = None


#: Each route's request body (for /openapi.json).
LORA_BODIES: dict[str, type[BaseModel]] = {
    "/v1/load_lora_adapter": LoadLoRAAdapterRequest,
    "/v1/unload_lora_adapter": UnloadLoRAAdapterRequest,
}


def _invalid(message: str) -> APIError:
    # vLLM's create_error_response(..., err_type="InvalidUserInput", status_code=400).
    return APIError(400, message, err_type="InvalidUserInput")


async def _body(request: Request, model: type[BaseModel]) -> BaseModel:
    # vLLM's validate_json_request: only application/json bodies.
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise APIError(400, "Unsupported Media Type: Only 'application/json' is allowed")
    data = json_body.loads(await request.body())
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


def _lora_model(state: ApiState) -> ServedModel:
    for served in state.models.values():
        if served.lora_enabled:
            return served
    raise _invalid("LoRA is not enabled for any served model (no model has a lora section).")


def lora_routes(state: ApiState) -> list[Route]:
    """The two routes, over ``state`` (its adapter index is what requests resolve ``model`` against)."""

    async def load(request: Request) -> Response:
        """Load a LoRA adapter at run time (vLLM, with VLLM_ALLOW_RUNTIME_LORA_UPDATING)"""
        body = await _body(request, LoadLoRAAdapterRequest)
        assert isinstance(body, LoadLoRAAdapterRequest)
        name, path = body.lora_name, body.lora_path
        if not name or not path:
            raise _invalid("Both 'lora_name' and 'lora_path' must be provided.")
        if name in state.models or name in state.aliases:
            raise _invalid(f"The lora adapter '{name}' conflicts with a served base model.")
        base = state.lora_adapters.get(name)
        if base is not None and not body.load_inplace:
            raise _invalid(
                f"The lora adapter '{name}' has already been loaded. "
                "If you want to load the adapter in place, set 'load_inplace' to True."
            )
        served = state.models[base] if base is not None else _lora_model(state)
        if base is None and len(served.lora_adapters) >= served.max_lora_adapters:
            raise _invalid(
                f"The model '{served.name}' already serves {len(served.lora_adapters)} LoRA adapters, "
                f"as many as max_cpu_loras allows loading at runtime: unload one before loading '{name}'."
            )
        served.engine.add_lora(name, path)
        served.lora_adapters[name] = path
        state.lora_adapters[name] = served.name
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    async def unload(request: Request) -> Response:
        """Unload a LoRA adapter (vLLM, with VLLM_ALLOW_RUNTIME_LORA_UPDATING)"""
        body = await _body(request, UnloadLoRAAdapterRequest)
        assert isinstance(body, UnloadLoRAAdapterRequest)
        name = body.lora_name
        if not name:
            raise _invalid("'lora_name' needs to be provided to unload a LoRA adapter.")
        base = state.lora_adapters.pop(name, None)
        if base is None:
            raise APIError(404, f"The lora adapter '{echoed(name)}' cannot be found.", err_type="NotFoundError")
        served = state.models[base]
        del served.lora_adapters[name]
        served.engine.remove_lora(name)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    return [
        Route("/v1/load_lora_adapter", load, methods=["POST"]),
        Route("/v1/unload_lora_adapter", unload, methods=["POST"]),
    ]
