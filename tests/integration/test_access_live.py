"""API keys, the admin key and the identity headers, as real clients see them from the real server."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.server import ServerProcess, running_server

pytestmark = pytest.mark.integration

CONFIG = """
version: 1
models:
  - name: instant
    engine: instant
    context_length: 2048
"""
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hello!"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # The flag wins over LLMSIM_API_KEY (as vLLM's over VLLM_API_KEY); the admin key comes from the environment.
    with running_server(
        tmp_path_factory.mktemp("access"),
        config=CONFIG,
        extra_args=["--api-key", "key-1,key-2", "--pod-name", "sim-0", "--pod-namespace", "team-a"],
        env={"LLMSIM_API_KEY": "from-env", "LLMSIM_ADMIN_KEY": "adm"},
    ) as s:
        yield s


def sdk(server: ServerProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0)


def test_no_key_is_vllms_401(server: ServerProcess) -> None:
    for path in ("/v1/chat/completions", "/v1/completions"):
        r = httpx.post(server.base_url + path, json={"model": "instant", "prompt": "x", "messages": MESSAGES})
        assert r.status_code == 401
        assert r.content == b'{"error":"Unauthorized"}'
    assert httpx.get(server.base_url + "/v1/models", headers={"authorization": "Basic key-1"}).status_code == 401


@pytest.mark.parametrize("key", ["wrong", "from-env", "adm"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_wrong_key_is_vllms_401(server: ServerProcess, key: str, stream: bool) -> None:
    with pytest.raises(openai.AuthenticationError) as info:
        sdk(server, key).chat.completions.create(model="instant", messages=MESSAGES, stream=stream)
    response = info.value.response
    assert response.status_code == 401
    assert response.content == b'{"error":"Unauthorized"}'
    assert response.headers["content-type"] == "application/json"
    assert "www-authenticate" not in response.headers


def test_either_key_serves_streamed_and_whole_answers(server: ServerProcess) -> None:
    for key in ("key-1", "key-2"):
        client = sdk(server, key)
        whole = client.chat.completions.create(model="instant", messages=MESSAGES)
        assert whole.choices[0].finish_reason == "stop"
        chunks = list(client.completions.create(model="instant", prompt="Hello!", stream=True))
        assert chunks[-1].choices[0].finish_reason is not None
        assert [m.id for m in client.models.list()] == ["instant"]


def test_health_ping_and_metrics_stay_open(server: ServerProcess) -> None:
    for path in ("/health", "/ping", "/metrics", "/version", "/is_sleeping"):
        assert httpx.get(server.base_url + path).status_code == 200, path


def test_admin_endpoints_take_the_admin_key_only(server: ServerProcess) -> None:
    url = server.base_url + "/admin/faults"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"authorization": "Bearer key-1"}).status_code == 401
    ok = httpx.get(url, headers={"authorization": "Bearer adm"})
    assert ok.status_code == 200
    assert set(ok.json()) == {"instant"}
    assert httpx.post(server.base_url + "/sleep", headers={"authorization": "Bearer key-1"}).status_code == 401


def test_responses_carry_the_request_id_and_the_replica(server: ServerProcess) -> None:
    raw = sdk(server, "key-1").chat.completions.with_raw_response.create(
        model="instant", messages=MESSAGES, extra_headers={"X-Request-Id": "gw-trace-42"}
    )
    assert raw.headers["x-request-id"] == "gw-trace-42"
    assert raw.headers["x-llmsim-pod"] == "sim-0"
    assert raw.headers["x-llmsim-namespace"] == "team-a"
    assert raw.parse().id == "chatcmpl-gw-trace-42"
    # A 401 and an open endpoint carry them too; without a client id the server makes one.
    for r in (httpx.get(server.base_url + "/v1/models"), httpx.get(server.base_url + "/health")):
        assert len(r.headers["x-request-id"]) == 32
        assert r.headers["x-llmsim-pod"] == "sim-0"
