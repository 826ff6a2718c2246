"""Prefix caching, LoRA adapters and their vLLM endpoints through the app in-process (httpx ASGITransport)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.runtime import build_runtime
from tests.metrics.scrape import parse

# A fast toy GPU (steps well under a millisecond) so requests finish at once in real time.
CONFIG = """
version: 1
hardware:
  toy: {hbm_gib: 2, memory_bandwidth_gbps: 2000, peak_tflops: 400}
models:
  - name: base
    engine: scheduler
    hardware: toy
    context_length: 1024
    weights: {parameters_billions: 0.01}
    kv_cache: {bytes_per_token: 1024, block_size: 16}
    enable_prompt_tokens_details: true
    lora:
      max_loras: 1
      adapters: [{name: sql, path: /adapters/sql}]
  - name: plain
    engine: scheduler
    hardware: toy
    context_length: 1024
    weights: {parameters_billions: 0.01}
    kv_cache: {bytes_per_token: 1024, block_size: 16}
"""
RESPONSES = """
version: 1
responses: []
default:
  content: "Fine."
"""
# "word" then 98 x " word": 99 regex tokens; one user message adds 4 template tokens and the reply
# priming 3: 106 prompt tokens. A repeat may hit floor(105 / 16) = 6 blocks = 96 tokens.
CONTENT = " ".join(["word"] * 99)
PROMPT_TOKENS = 99 + 4 + 3
HIT = 96
M = {"model_name": "base", "engine": "0"}


@pytest.fixture
async def http(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    runtime = build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml")
    transport = httpx.ASGITransport(app=runtime.app)
    client = httpx.AsyncClient(transport=transport, base_url="http://test")
    async with runtime.app.router.lifespan_context(runtime.app), client:
        yield client


def chat(model: str = "base", content: str = CONTENT, **kw: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], **kw}


async def test_a_repeated_prompt_reports_its_cached_tokens(http: httpx.AsyncClient) -> None:
    first = (await http.post("/v1/chat/completions", json=chat())).json()
    assert first["usage"]["prompt_tokens"] == PROMPT_TOKENS
    assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    second = (await http.post("/v1/chat/completions", json=chat())).json()
    assert second["usage"]["prompt_tokens_details"] == {"cached_tokens": HIT}
    # Streamed, the final usage chunk carries it.
    r = await http.post("/v1/chat/completions", json=chat(stream=True, stream_options={"include_usage": True}))
    events = [json.loads(line[6:]) for line in r.text.split("\n\n") if line.startswith("data: {")]
    assert events[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": HIT}
    page = parse((await http.get("/metrics")).text)
    assert page.get("vllm:prefix_cache_queries_total", **M) == 3 * PROMPT_TOKENS
    assert page.get("vllm:prefix_cache_hits_total", **M) == 2 * HIT


async def test_without_prompt_tokens_details_usage_has_none_as_vllm_by_default(http: httpx.AsyncClient) -> None:
    await http.post("/v1/chat/completions", json=chat("plain"))
    body = (await http.post("/v1/chat/completions", json=chat("plain"))).json()
    assert "prompt_tokens_details" not in body["usage"]
    page = parse((await http.get("/metrics")).text)
    # The cache still works, it is only not reported in usage.
    assert page.get("vllm:prefix_cache_hits_total", model_name="plain", engine="0") == HIT


async def test_an_adapter_runs_on_its_base_model_and_keeps_its_own_cache(http: httpx.AsyncClient) -> None:
    models = (await http.get("/v1/models")).json()["data"]
    sql = next(m for m in models if m["id"] == "sql")
    assert (sql["parent"], sql["root"], sql["max_model_len"]) == ("base", "/adapters/sql", None)
    await http.post("/v1/chat/completions", json=chat())
    body = (await http.post("/v1/chat/completions", json=chat("sql"))).json()
    assert body["model"] == "sql"
    # The adapter is in every block hash: the base model's blocks are no hit for it.
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    again = (await http.post("/v1/chat/completions", json=chat("sql"))).json()
    assert again["usage"]["prompt_tokens_details"] == {"cached_tokens": HIT}
    page = parse((await http.get("/metrics")).text)
    labels = {"max_lora": "1", "running_lora_adapters": "", "waiting_lora_adapters": ""}
    assert page.get("vllm:lora_requests_info", **M, **labels) > 1e9  # a unix timestamp
    assert not any(k[0] == "vllm:lora_requests_info" and ("model_name", "plain") in k[1] for k in page.values)


async def test_runtime_adapter_loading_with_vllms_answers(http: httpx.AsyncClient) -> None:
    load = {"lora_name": "news", "lora_path": "/adapters/news"}
    r = await http.post("/v1/load_lora_adapter", json=load)
    assert (r.status_code, r.text) == (200, "Success: LoRA adapter 'news' added successfully.")
    assert (await http.post("/v1/chat/completions", json=chat("news"))).json()["model"] == "news"
    again = await http.post("/v1/load_lora_adapter", json=load)
    assert again.status_code == 400
    assert again.json()["error"] == {
        "message": "The lora adapter 'news' has already been loaded. "
        "If you want to load the adapter in place, set 'load_inplace' to True.",
        "type": "InvalidUserInput",
        "param": None,
        "code": 400,
    }
    assert (await http.post("/v1/load_lora_adapter", json=load | {"load_inplace": True})).status_code == 200
    clash = await http.post("/v1/load_lora_adapter", json={"lora_name": "base", "lora_path": "/x"})
    assert clash.json()["error"]["message"] == "The lora adapter 'base' conflicts with a served base model."
    empty = await http.post("/v1/load_lora_adapter", json={"lora_name": "", "lora_path": "/x"})
    assert empty.json()["error"]["message"] == "Both 'lora_name' and 'lora_path' must be provided."
    r = await http.post("/v1/unload_lora_adapter", json={"lora_name": "news"})
    assert (r.status_code, r.text) == (200, "Success: LoRA adapter 'news' removed successfully.")
    gone = await http.post("/v1/unload_lora_adapter", json={"lora_name": "news"})
    assert (gone.status_code, gone.json()["error"]["type"]) == (404, "NotFoundError")
    assert gone.json()["error"]["message"] == "The lora adapter 'news' cannot be found."
    assert (await http.post("/v1/chat/completions", json=chat("news"))).status_code == 404
    assert "news" not in [m["id"] for m in (await http.get("/v1/models")).json()["data"]]
    text = await http.post("/v1/load_lora_adapter", content=b"lora_name=x", headers={"content-type": "text/plain"})
    assert text.status_code == 400


async def test_reset_prefix_cache_in_dev_mode(http: httpx.AsyncClient) -> None:
    await http.post("/v1/chat/completions", json=chat())
    r = await http.post("/reset_prefix_cache")
    assert r.json() == {"success": True}
    body = (await http.post("/v1/chat/completions", json=chat())).json()
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


async def test_the_runtime_routes_need_their_switches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", raising=False)
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    (tmp_path / "models.yml").write_text(CONFIG)
    runtime = build_runtime(tmp_path / "models.yml")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=runtime.app), base_url="http://t") as client:
        assert (
            await client.post("/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": "b"})
        ).status_code == 404
        assert (await client.post("/reset_prefix_cache")).status_code == 404
