"""OpenAI-shaped errors: ``{"error": {"message", "type", "param", "code"}}`` with vLLM's types."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    413: "RequestEntityTooLarge",
    429: "RateLimitError",
    503: "ServiceUnavailableError",
}
#: Seconds a client should wait before retrying a 429 or 503 (the ``Retry-After`` header).
RETRY_AFTER_S = 1


class APIError(Exception):
    """An error the API answers with; raised anywhere under a route."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        err_type: str | None = None,
        code: int | str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.err_type = err_type or _TYPES.get(status, "InternalServerError")
        # vLLM puts the HTTP status here; OpenAI a string for some errors (model_not_found).
        self.code = status if code is None else code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.err_type, "param": self.param, "code": self.code}}

    def response(self) -> Response:
        return Response(
            json.dumps(self.body()), status_code=self.status, media_type="application/json", headers=self.headers
        )


#: The most of a client's name (a model, an adapter) an error message repeats.
MAX_ECHOED_NAME_CHARS = 256


def echoed(name: str) -> str:
    """``name`` as an error message repeats it: cut past MAX_ECHOED_NAME_CHARS (a 1 MB name is not sent back)."""
    if len(name) <= MAX_ECHOED_NAME_CHARS:
        return name
    return f"{name[:MAX_ECHOED_NAME_CHARS]}...[{len(name) - MAX_ECHOED_NAME_CHARS} more characters]"


def model_not_found(model: str) -> APIError:
    # vLLM's message and type; OpenAI's code, which clients and proxies match on.
    return APIError(404, f"The model `{echoed(model)}` does not exist.", param="model", code="model_not_found")


def overloaded() -> APIError:
    return APIError(
        503,
        "The server is overloaded: too many requests are waiting. Retry later.",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def request_too_large(limit: int) -> APIError:
    return APIError(
        413, f"The request body is larger than the server's limit of {limit} bytes (llmsim serve --max-request-bytes)."
    )


# vLLM's validation handler (serve/exception_handling/handlers/validation.py) bounds what it echoes.
_MAX_REPORTED_ERRORS = 10
_MAX_ERROR_INPUT_CHARS = 200
_MAX_ERROR_CHARS = 1000
#: The ``type`` of a body that failed validation: the HTTP phrase, as vLLM's handler writes it.
VALIDATION_ERROR_TYPE = "Bad Request"


def _summarize_input(value: object) -> object:
    # Containers are described, not rendered (a huge list would be repr'd whole first).
    if isinstance(value, str):
        return value if len(value) <= _MAX_ERROR_INPUT_CHARS else value[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]"
    if isinstance(value, bytes | bytearray):
        return f"<{type(value).__name__} of {len(value)} bytes>"
    if isinstance(value, list | tuple | set | frozenset | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = str(value)
    except ValueError:  # an int past sys.get_int_max_str_digits()
        return f"<{type(value).__name__}>"
    return text if len(text) <= _MAX_ERROR_INPUT_CHARS else text[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]"


def _is_internal(segment: str) -> bool:
    # pydantic spells union branches and wrappers in loc ("list[int]", "function-after[...]", "str").
    return any(c in segment for c in "[]{}()") or segment.lower() in _INTERNAL_LOC_MARKERS


_INTERNAL_LOC_MARKERS = frozenset(
    {
        "function-wrap", "function-after", "function-before", "function-plain", "json-or-python", "lax-or-strict",
        "chain", "default", "nullable", "tagged-union", "union", "call", "arguments", "is-instance", "is-subclass",
        "callable", "str", "int", "float", "bool", "bytes", "bytearray", "list", "tuple", "dict", "set", "frozenset",
        "complex", "none", "nonetype",
    }
)  # fmt: skip


def clean_loc(loc: Sequence[int | str]) -> str:
    """A pydantic ``loc`` as vLLM's ``param``: dotted, without pydantic's internal markers."""
    parts = [str(p) for p in loc if not _is_internal(str(p))]
    return ".".join(parts) if parts else ".".join(str(p) for p in loc)


def _format_error(err: object) -> str:
    if isinstance(err, dict):
        err = dict(err)
        if "input" in err:
            err["input"] = _summarize_input(err["input"])
        if isinstance(err.get("loc"), tuple | list):
            err["loc"] = clean_loc(err["loc"])
    text = str(err)
    return text if len(text) <= _MAX_ERROR_CHARS else text[:_MAX_ERROR_CHARS] + "...[truncated]"


def validation_failed(errors: Sequence[object]) -> APIError:
    """400 as vLLM's ``validation_exception_handler`` answers FastAPI's RequestValidationError.

    ``errors`` are FastAPI-style: dicts with ``loc`` starting at ``"body"``, or plain strings.
    """
    param = None
    first = errors[0] if errors else None
    if isinstance(first, dict) and first.get("loc"):
        param = clean_loc(first["loc"])
    if errors:
        count = len(errors)
        label = "error" if count == 1 else "errors"
        reported = errors[:_MAX_REPORTED_ERRORS]
        message = f"{count} validation {label}:\n" + "".join(f"  {_format_error(e)}\n" for e in reported)
        if count > len(reported):
            message += f"  ...and {count - len(reported)} more {label}\n"
        message = message.rstrip()
    else:
        message = "Validation error"
    return APIError(400, message, param=param, err_type=VALIDATION_ERROR_TYPE, code=400)


def from_validation_error(exc: ValidationError) -> APIError:
    """A body that failed its pydantic model, in vLLM's words (FastAPI's errors: loc from ``body``, no url)."""
    errors: list[object] = []
    for e in exc.errors(include_url=False):
        item: dict[str, Any] = {"type": e["type"], "loc": ("body", *e["loc"]), "msg": e["msg"], "input": e["input"]}
        if "ctx" in e:
            item["ctx"] = e["ctx"]
        errors.append(item)
    return validation_failed(errors)


def unsupported_media_type() -> APIError:
    """vLLM's ``validate_json_request``: anything but ``application/json`` is a 400 (not 415)."""
    return validation_failed(["Unsupported Media Type: Only 'application/json' is allowed"])


def invalid_json(body: bytes) -> APIError:
    """A body that is not JSON, as FastAPI reports it (the decoder's message and byte offset)."""
    try:
        json.loads(body)
    except json.JSONDecodeError as exc:
        error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error", "input": {}}
        return validation_failed([{**error, "ctx": {"error": exc.msg}}])
    except ValueError:  # not UTF-8: FastAPI's generic answer
        pass
    return APIError(400, "There was an error parsing the body", err_type=VALIDATION_ERROR_TYPE)


async def api_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return exc.response()
