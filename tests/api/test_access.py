"""API and admin keys, and the identity headers, on every path: the completion routes' fast path included."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from starlette.middleware.base import BaseHTTPMiddleware

from llmsim.api.access import Access, parse_keys
from llmsim.api.identity import Identity
from llmsim.engine import MonotonicClock
from llmsim.runtime import Runtime, build_runtime
from tests.api.asgi_driver import Exchange, call, http_scope

CONFIG = """
version: 1
models:
  - {name: m, engine: instant}
"""
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def build(tmp_path: Path, access: Access, identity: Identity | None = None) -> Runtime:
    (tmp_path / "models.yml").write_text(CONFIG)
    clock = MonotonicClock(now=asyncio.get_running_loop().time)
    return build_runtime(tmp_path / "models.yml", clock=clock, access=access, identity=identity)


def bearer(key: str, scheme: str = "Bearer") -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"{scheme} {key}".encode())]


def assert_unauthorized(ex: Exchange) -> None:
    assert ex.start["status"] == 401
    headers = dict(ex.start["headers"])
    assert headers[b"content-type"] == b"application/json"
    assert b"www-authenticate" not in headers
    assert ex.body == b'{"error":"Unauthorized"}'


def test_keys_come_from_repeated_flags_or_commas() -> None:
    assert parse_keys(["a,b", " c ", None, ""]) == ("a", "b", "c")
    assert parse_keys([None]) == ()


def test_vllm_guarded_prefixes_and_open_paths() -> None:
    access = Access(api_keys=["k"])
    for path in ("/v1/chat/completions", "/v1/models", "/v1foo", "/v2/x", "/inference/v1/generate", "/cohere/v2/chat"):
        assert access.refusal(http_scope(path)) is not None, path
    for path in ("/health", "/ping", "/metrics", "/metrics/summary", "/version", "/load", "/is_sleeping", "/tokenize"):
        assert access.refusal(http_scope(path, "GET")) is None, path
    assert access.refusal(http_scope("/v1/models", "OPTIONS")) is None
    assert access.refusal(http_scope("/v1/models", headers=bearer("k", "bEaReR"))) is None
    assert access.refusal(http_scope("/v1/models", headers=bearer("k", "Basic"))) is not None
    # The token follows the first space exactly, as vLLM: no trimming.
    assert access.refusal(http_scope("/v1/models", headers=[(b"authorization", b"Bearer  k")])) is not None


def test_anthropic_clients_send_their_key_as_x_api_key() -> None:
    # As vLLM: an Anthropic client (or a proxy in front of /v1/messages) sends x-api-key, not a bearer token.
    access = Access(api_keys=["k"])
    assert access.refusal(http_scope("/v1/messages", headers=[(b"x-api-key", b"k")])) is None
    assert access.refusal(http_scope("/v1/messages", headers=[(b"x-api-key", b"j")])) is not None
    assert access.refusal(http_scope("/v1/messages", headers=[(b"x-api-key", b"")])) is not None
    wrong_bearer = [(b"authorization", b"Bearer j"), (b"x-api-key", b"k")]
    assert access.refusal(http_scope("/v1/messages", headers=wrong_bearer)) is None


@pytest.mark.parametrize(
    ("api", "admin", "key", "allowed"),
    [
        ((), (), None, True),  # nothing set: open
        (("k",), (), None, False),  # API key, no admin key: closed to everyone
        (("k",), (), "k", False),
        ((), ("a",), None, False),
        ((), ("a",), "a", True),
        (("k",), ("a",), "k", False),  # the API key is not the admin key
        (("k",), ("a", "b"), "b", True),
    ],
)
def test_admin_endpoints_take_the_admin_key(
    api: tuple[str, ...], admin: tuple[str, ...], key: str | None, allowed: bool
) -> None:
    access = Access(api, admin)
    for method, path in ADMIN_ROUTES:
        scope = http_scope(path, method, headers=bearer(key) if key else ())
        assert (access.refusal(scope) is None) is allowed, path


ADMIN_ROUTES = [
    ("GET", "/admin/faults"),
    ("PUT", "/admin/faults"),
    ("POST", "/sleep"),
    ("POST", "/wake_up"),
    ("POST", "/reset_prefix_cache"),
    ("DELETE", "/metrics/summary"),
    ("POST", "/v1/load_lora_adapter"),
    ("POST", "/v1/unload_lora_adapter"),
]


def test_reading_the_summary_stays_open_when_clearing_it_takes_the_admin_key() -> None:
    access = Access(["k"], ["a"])
    assert access.refusal(http_scope("/metrics/summary", "GET")) is None
    assert access.refusal(http_scope("/metrics/summary", "DELETE")) is not None
    assert access.refusal(http_scope("/metrics/summary", "DELETE", headers=bearer("a"))) is None


@pytest.mark.looptime
async def test_the_fast_path_refuses_without_a_key_and_serves_with_one(tmp_path: Path) -> None:
    runtime = build(tmp_path, Access(["k1", "k2"]))
    assert_unauthorized(await call(runtime.app, "/v1/chat/completions", CHAT))
    assert_unauthorized(await call(runtime.app, "/v1/completions", CHAT, headers=bearer("wrong")))
    ok = await call(runtime.app, "/v1/chat/completions", CHAT, headers=bearer("k2"))
    assert ok.start["status"] == 200
    assert ok.body.endswith(b"data: [DONE]\n\n")
    health = await call(runtime.app, "/health", None, method="GET")
    assert health.start["status"] == 200


@pytest.mark.looptime
async def test_the_check_holds_behind_fastapis_middleware_too(tmp_path: Path) -> None:
    runtime = build(tmp_path, Access(["k"]))

    async def passthrough(request, call_next):  # type: ignore[no-untyped-def]
        return await call_next(request)

    runtime.app.add_middleware(BaseHTTPMiddleware, dispatch=passthrough)
    assert_unauthorized(await call(runtime.app, "/v1/chat/completions", CHAT))
    ok = await call(runtime.app, "/v1/chat/completions", CHAT, headers=bearer("k"))
    assert ok.start["status"] == 200


@pytest.mark.looptime
async def test_identity_headers_on_every_response(tmp_path: Path) -> None:
    runtime = build(tmp_path, Access(["k"]), Identity(pod="sim-7f9c", namespace="team-a"))
    cases = [
        await call(runtime.app, "/v1/chat/completions", CHAT, headers=[*bearer("k"), (b"x-request-id", b"trace-1")]),
        await call(runtime.app, "/v1/chat/completions", CHAT, headers=[(b"x-request-id", b"trace-1")]),  # 401
        await call(runtime.app, "/metrics", None, method="GET", headers=[(b"x-request-id", b"trace-1")]),
        await call(
            runtime.app,
            "/v1/chat/completions",
            {"model": "nope"},
            headers=[*bearer("k"), (b"x-request-id", b"trace-1")],
        ),
    ]
    assert [ex.start["status"] for ex in cases] == [200, 401, 200, 400]
    for ex in cases:
        headers = ex.start["headers"]
        assert (b"x-request-id", b"trace-1") in headers
        assert (b"x-llmsim-pod", b"sim-7f9c") in headers
        assert (b"x-llmsim-namespace", b"team-a") in headers
    # llm-d-inference-sim's names, only from its own environment variables.
    assert not any(name.startswith(b"x-inference-") for name, _ in cases[0].start["headers"])
    # vLLM names the completion after the client's X-Request-Id.
    first = json.loads(cases[0].body.split(b"\n\n")[0][len(b"data: ") :])
    assert first["id"] == "chatcmpl-trace-1"


@pytest.mark.looptime
async def test_without_a_client_id_each_response_gets_its_own_and_the_completion_id_matches(tmp_path: Path) -> None:
    runtime = build(tmp_path, Access())
    ids = []
    for _ in range(2):
        ex = await call(runtime.app, "/v1/chat/completions", {**CHAT, "stream": False})
        (request_id,) = [v for k, v in ex.start["headers"] if k == b"x-request-id"]
        assert len(request_id) == 32
        assert json.loads(ex.body)["id"] == "chatcmpl-" + request_id.decode()
        ids.append(request_id)
        assert not any(k == b"x-llmsim-pod" for k, _ in ex.start["headers"])
    assert ids[0] != ids[1]


@pytest.mark.looptime
async def test_llm_d_inference_sim_identity_headers(tmp_path: Path) -> None:
    identity = Identity(inference_pod="sim-7f9c", inference_namespace="team-a", port=8000)
    runtime = build(tmp_path, Access([]), identity)
    for ex in (
        await call(runtime.app, "/v1/chat/completions", CHAT),
        await call(runtime.app, "/health/ready", None, method="GET"),
    ):
        headers = ex.start["headers"]
        assert (b"x-inference-pod", b"sim-7f9c") in headers
        assert (b"x-inference-namespace", b"team-a") in headers
        assert (b"x-inference-port", b"8000") in headers
        assert not any(name.startswith(b"x-llmsim-pod") for name, _ in headers)
