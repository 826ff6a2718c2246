"""The routes routers call, over httpx against the real server: render, generate (streamed), load and info."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.support.server import ServerProcess, running_server

pytestmark = pytest.mark.integration

CONFIG = """
version: 1
models:
  - {name: m, engine: fixed, context_length: 2048, latency: {ttft_overhead_ms: 5, itl_ms: 2}}
"""
MESSAGES = [{"role": "user", "content": "What is a prefix cache?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("router-routes"), config=CONFIG) as s:
        yield s


def test_a_rendered_chat_is_generated_token_for_token(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.base_url) as http:
        rendered = http.post("/v1/chat/completions/render", json={"model": "m", "messages": MESSAGES, "max_tokens": 4})
        assert rendered.status_code == 200
        body = rendered.json()
        tokenized = http.post("/tokenize", json={"model": "m", "messages": MESSAGES}).json()
        assert body["token_ids"] == tokenized["tokens"]
        body |= {"stream": True, "stream_options": {"include_usage": True}}
        with http.stream("POST", "/inference/v1/generate", json=body) as r:
            assert r.status_code == 200
            data = [line[len("data: ") :] for line in r.iter_lines() if line.startswith("data: ")]
        assert data[-1] == "[DONE]"
        events = [json.loads(d) for d in data[:-1]]
        ids = [i for e in events for c in e["choices"] for i in c["token_ids"]]
        assert len(ids) == 4
        assert events[-1]["usage"]["prompt_tokens"] == tokenized["count"]
        # Not streamed: the same ids (a script answers the same prompt the same way).
        whole = http.post("/inference/v1/generate", json=body | {"stream": False, "stream_options": None}).json()
        assert whole["choices"][0]["token_ids"] == ids


def test_load_and_sglang_info(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.base_url) as http:
        assert http.get("/get_load").json() == {"load": 0}
        # A fixed engine has no KV cache: no token load, so sglang-router counts requests itself.
        loads = http.get("/v1/loads", params={"include": "core"}).json()
        assert loads["aggregate"] == {"total_running_reqs": 0, "total_waiting_reqs": 0}
        assert http.get("/server_info").json()["dp_size"] == 1
        assert http.get("/model_info").json()["is_generation"] is True
        assert "/inference/v1/generate" in http.get("/openapi.json").json()["paths"]
