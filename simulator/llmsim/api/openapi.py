"""What /openapi.json says about each route: its request body, its answers and their models.

The endpoints read their bodies themselves (``routes.parse_body``, vLLM's validation and error
texts), so FastAPI cannot infer request bodies from their signatures: each route declares its
request model here, and :func:`add_request_schemas` puts those models in the document's
components. Response models come from :mod:`llmsim.api.response_models`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from llmsim.api.response_models import ErrorResponse

_ERROR_DESCRIPTIONS = {
    400: "The request is invalid (vLLM's validation errors and texts)",
    404: "No such model (or it does not serve this API)",
    503: "The model's waiting queue is full (Retry-After says when to retry) or it is not serving",
}


def sse_content(chunk: type[BaseModel]) -> dict[str, Any]:
    """A ``text/event-stream`` answer whose events carry ``chunk`` objects.

    Described event by event with OpenAPI 3.2's ``itemSchema`` (what schemathesis checks each
    event against): an event's ``data`` is ``[DONE]``, or JSON (``contentMediaType``) holding a
    chunk, or an error if one happens mid-stream. No ``schema``: before 3.2 a tool reads it as the
    schema of each event, which is no string.
    """
    payload = {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {
            "anyOf": [
                {"$ref": f"#/components/schemas/{chunk.__name__}"},
                {"$ref": f"#/components/schemas/{ErrorResponse.__name__}"},
            ]
        },
    }
    event = {
        "type": "object",
        "description": f"With `stream: true`: `data: <{chunk.__name__} JSON>` events, then `data: [DONE]`.",
        "required": ["data"],
        "properties": {"data": {"if": {"const": "[DONE]"}, "then": True, "else": payload}},
    }
    return {"text/event-stream": {"itemSchema": event}}


def request_body(*models: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a JSON body of one of ``models``."""
    refs = [{"$ref": f"#/components/schemas/{m.__name__}"} for m in models]
    schema = refs[0] if len(refs) == 1 else {"anyOf": refs}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def responses(
    model: type[BaseModel] | None,
    *,
    errors: Sequence[int] = (),
    stream: type[BaseModel] | None = None,
    description: str = "OK",
) -> dict[int | str, dict[str, Any]]:
    """FastAPI ``responses``: 200 with ``model`` (and an SSE stream of ``stream`` chunks), plus error statuses."""
    ok: dict[str, Any] = {"description": description}
    if model is not None:
        ok["model"] = model
    if stream is not None:
        ok["content"] = sse_content(stream)
    out: dict[int | str, dict[str, Any]] = {200: ok}
    for status in errors:
        # Content given, not a model: an error is JSON even where the answer is text (FastAPI would
        # document it in the route's media type).
        out[status] = {"description": _ERROR_DESCRIPTIONS[status], "content": {"application/json": {"schema": _ERROR}}}
    return out


_ERROR = {"$ref": f"#/components/schemas/{ErrorResponse.__name__}"}


def add_request_schemas(document: dict[str, Any], models: Sequence[type[BaseModel]]) -> None:
    """Put the request models (and the models they use), and the error body, in ``document``'s components."""
    pairs: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "validation") for m in models]
    pairs.append((ErrorResponse, "serialization"))
    _, defs = models_json_schema(pairs, ref_template="#/components/schemas/{model}")
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in defs.get("$defs", {}).items():
        schemas.setdefault(name, schema)
