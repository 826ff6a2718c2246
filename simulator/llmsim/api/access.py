"""Who may call what: vLLM's API keys on its API paths, and an admin key on llmsim's control endpoints.

As vLLM's ``AuthenticationMiddleware`` (vllm/entrypoints/serve/middleware/authenticate.py): with
API keys set, a request whose path starts with ``/v1``, ``/v2``, ``/inference`` or ``/cohere``
needs ``Authorization: Bearer <one of the keys>`` (scheme case-insensitive, keys compared as
SHA-256 digests in constant time), else 401 with exactly ``{"error":"Unauthorized"}`` and no
``WWW-Authenticate``; ``OPTIONS`` is never checked; ``/health``, ``/ping``, ``/metrics`` and the
rest stay open.

llmsim's own control endpoints (``/admin/*``, ``DELETE /metrics/summary``) and vLLM's routes that
change the server (the dev-mode ``/sleep``, ``/wake_up``, ``/reset_prefix_cache``; the runtime LoRA
``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``) take the admin key, not an API key.
Without an admin key they are open only when no API key is set either: a fleet that asks clients
for a key does not let them switch faults, load adapters or put replicas to sleep.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Sequence

from starlette.responses import Response
from starlette.types import Scope

#: vLLM's guarded prefixes (a string prefix test, as vLLM: ``/v1foo`` is guarded too).
API_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
ADMIN_PREFIX = "/admin"
#: Control endpoints guarded like /admin/*: vLLM serves the first three unauthenticated, in dev
#: mode only, and the LoRA routes (behind VLLM_ALLOW_RUNTIME_LORA_UPDATING) with any API key.
ADMIN_PATHS = frozenset(
    {"/sleep", "/wake_up", "/reset_prefix_cache", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"}
)
#: Paths guarded like /admin/* for some methods only (reading stays open, as for /metrics).
ADMIN_METHODS = {"/metrics/summary": frozenset({"DELETE"})}
_UNAUTHORIZED = b'{"error":"Unauthorized"}'


def parse_keys(values: Iterable[str | None]) -> tuple[str, ...]:
    """Keys from repeated flags or comma-separated values (``--api-key a,b``, ``LLMSIM_API_KEY=a,b``)."""
    return tuple(key.strip() for value in values if value for key in value.split(",") if key.strip())


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class Access:
    """Checks one request's ``Authorization`` (or ``x-api-key``) header against the path's keys.

    Parameters
    ----------
    api_keys:
        Keys for the API paths; empty: the API is open.
    admin_keys:
        Keys for the control endpoints; empty: they are open only if ``api_keys`` is empty too.
    """

    def __init__(self, api_keys: Sequence[str] = (), admin_keys: Sequence[str] = ()) -> None:
        self._api = tuple(_digest(k) for k in api_keys)
        self._admin = tuple(_digest(k) for k in admin_keys)
        # True: control endpoints refuse everyone (API keys set, no admin key).
        self.admin_closed = bool(api_keys) and not admin_keys
        self.enabled = bool(api_keys or admin_keys)

    def refusal(self, scope: Scope) -> Response | None:
        """The 401 to answer, or None when the request may go on."""
        if scope.get("method") == "OPTIONS":
            return None
        path: str = scope["path"]
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :]
        if path.startswith(ADMIN_PREFIX) or path in ADMIN_PATHS or scope.get("method") in ADMIN_METHODS.get(path, ()):
            keys = self._admin
            if not keys and not self.admin_closed:
                return None
        elif path.startswith(API_PREFIXES):
            keys = self._api
            if not keys:
                return None
        else:
            return None
        if keys and _matches(scope, keys):
            return None
        return Response(_UNAUTHORIZED, status_code=401, media_type="application/json")


def _matches(scope: Scope, keys: tuple[bytes, ...]) -> bool:
    """``Authorization: Bearer <key>``, or Anthropic's ``x-api-key: <key>`` (vLLM accepts either)."""
    headers = scope["headers"]
    value = next((v for k, v in headers if k == b"authorization"), None)
    if value is not None:
        scheme, _, token = value.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and _known(token, keys):
            return True
    api_key: bytes | None = next((v for k, v in headers if k == b"x-api-key"), None)
    return api_key is not None and api_key != b"" and _known(api_key.decode("latin-1"), keys)


def _known(token: str, keys: tuple[bytes, ...]) -> bool:
    presented = _digest(token)
    # Every key is compared (no early exit), as vLLM does.
    found = False
    for key in keys:
        found |= secrets.compare_digest(presented, key)
    return found
