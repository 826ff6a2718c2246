"""OpenAI-shaped errors: ``{"error": {"message", "type", "param", "code"}}`` with vLLM's types."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from llmsim.errors import format_loc

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


def model_not_found(model: str) -> APIError:
    # vLLM's message and type; OpenAI's code, which clients and proxies match on.
    return APIError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")


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


def from_validation_error(exc: ValidationError) -> APIError:
    """pydantic errors -> 400 with vLLM's "N validation error(s)" and the first field as param."""
    errors = exc.errors(include_url=False)
    n = len(errors)
    details = "; ".join(f"{format_loc(e['loc']) or 'body'}: {e['msg']}" for e in errors[:5])
    first = format_loc(errors[0]["loc"]) if errors else None
    return APIError(400, f"{n} validation error{'s' if n != 1 else ''}: {details}", param=first or None)


async def api_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return exc.response()
