"""Response headers that tell a gateway test which replica answered, and which request it was.

- ``x-request-id``: the client's ``X-Request-Id`` echoed, or a new uuid4 hex (vLLM's
  ``XRequestIdMiddleware``); the completion id is ``chatcmpl-<it>`` / ``cmpl-<it>``, as vLLM
  names a request after the header.
- ``x-llmsim-pod``, ``x-llmsim-namespace``: the pod and namespace (the operator passes them
  through the Downward API), when set.
- ``x-inference-pod``, ``x-inference-namespace``, ``x-inference-port``: llm-d-inference-sim's names
  for the same, from its ``POD_NAME`` and ``POD_NAMESPACE`` environment (the port with the pod).

NOTE: vLLM adds ``X-Request-Id`` only with ``--enable-request-id-headers``; llmsim always does
(a gateway test needs it, and an extra response header breaks no client).
"""

from __future__ import annotations

import uuid

from starlette.types import Message, Scope, Send

REQUEST_ID_HEADER = b"x-request-id"
#: Scope key of the request id (read by the routes for the completion id and the fault draw).
SCOPE_REQUEST_ID = "llmsim.request_id"
#: Scope key: the client sent the request id (a fault draw keys on it only then).
SCOPE_CLIENT_REQUEST_ID = "llmsim.client_request_id"

Headers = list[tuple[bytes, bytes]]


class Identity:
    """The headers every HTTP response of this server carries.

    Parameters
    ----------
    pod, namespace:
        Sent as ``x-llmsim-pod`` and ``x-llmsim-namespace`` when not empty.
    inference_pod, inference_namespace, port:
        Sent as llm-d-inference-sim's ``x-inference-pod`` (with ``x-inference-port``) and
        ``x-inference-namespace`` when not empty.
    """

    def __init__(
        self,
        pod: str | None = None,
        namespace: str | None = None,
        *,
        inference_pod: str | None = None,
        inference_namespace: str | None = None,
        port: int | None = None,
    ) -> None:
        self._static: Headers = []
        if pod:
            self._static.append((b"x-llmsim-pod", pod.encode("latin-1")))
        if namespace:
            self._static.append((b"x-llmsim-namespace", namespace.encode("latin-1")))
        if inference_pod:
            self._static.append((b"x-inference-pod", inference_pod.encode("latin-1")))
            if port is not None:
                self._static.append((b"x-inference-port", str(port).encode()))
        if inference_namespace:
            self._static.append((b"x-inference-namespace", inference_namespace.encode("latin-1")))

    def headers(self, scope: Scope) -> Headers:
        """This request's response headers; records its request id in the scope."""
        value = next((v for k, v in scope["headers"] if k == REQUEST_ID_HEADER), None)
        scope[SCOPE_CLIENT_REQUEST_ID] = value is not None
        if value is None:
            value = uuid.uuid4().hex.encode()
        scope[SCOPE_REQUEST_ID] = value.decode("latin-1")
        return [(REQUEST_ID_HEADER, value), *self._static]


def with_headers(send: Send, headers: Headers) -> Send:
    """``send`` adding ``headers`` to the response start (for the routes behind FastAPI's stack)."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *headers]}
        await send(message)

    return wrapped
