"""A full waiting queue answers 503 up front, in OpenAI's shape, and the queued requests still finish."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from llmsim.engine import MonotonicClock
from llmsim.runtime import build_runtime
from tests.api.asgi_driver import Exchange, call

# One running sequence at a time, one waiting: the third concurrent request is refused.
CONFIG = """
version: 1
models:
  - name: sim
    engine: scheduler
    profile: qwen2.5-0.5b
    hardware: l4-24gb
    context_length: 4096
    scheduler: {max_batch_tokens: 2048, max_num_sequences: 1, max_waiting_requests: 1}
"""
RESPONSES = """
version: 1
responses: []
default:
  synthetic: {tokens: [20, 20]}
"""
BODY = {"model": "sim", "messages": [{"role": "user", "content": "hello"}]}


def status(ex: Exchange) -> int:
    start = ex.sent[0][1]
    assert start["type"] == "http.response.start"
    code: int = start["status"]
    return code


def body(ex: Exchange) -> object:
    return json.loads(b"".join(m.get("body", b"") for _, m in ex.sent[1:]))


@pytest.mark.looptime
async def test_third_request_gets_503_while_one_runs_and_one_waits(tmp_path: Path) -> None:
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    runtime = build_runtime(
        tmp_path / "models.yml",
        tmp_path / "responses.yml",
        clock=MonotonicClock(now=asyncio.get_running_loop().time),
    )
    engine = runtime.state.models["sim"].engine
    await engine.start()
    try:
        first = asyncio.create_task(call(runtime.app, "/v1/chat/completions", BODY))
        await asyncio.sleep(0.001)  # admitted: running
        second = asyncio.create_task(call(runtime.app, "/v1/chat/completions", BODY))
        await asyncio.sleep(0.001)  # queued behind it: waiting
        snap = engine.snapshot()
        assert (snap.num_running, snap.num_waiting) == (1, 1)
        third = await call(runtime.app, "/v1/chat/completions", BODY)
        assert status(third) == 503
        assert (b"retry-after", b"1") in third.sent[0][1]["headers"]
        assert body(third) == {
            "error": {
                "message": "The server is overloaded: too many requests are waiting. Retry later.",
                "type": "ServiceUnavailableError",
                "param": None,
                "code": 503,
            }
        }
        done = await asyncio.gather(first, second)
        assert [status(ex) for ex in done] == [200, 200]
        for ex in done:
            reply = body(ex)
            assert isinstance(reply, dict)
            assert reply["usage"]["completion_tokens"] == 20
    finally:
        await engine.stop()


@pytest.mark.looptime
async def test_streams_with_n_choices_are_refused_before_the_response_starts(tmp_path: Path) -> None:
    """100 concurrent ``stream: true, n: 4`` requests against a waiting limit of 4: each is either a
    complete 200 stream or a 503 with its JSON body, never a 200 followed by an error event."""
    (tmp_path / "models.yml").write_text(CONFIG.replace("max_waiting_requests: 1", "max_waiting_requests: 4"))
    (tmp_path / "responses.yml").write_text(RESPONSES)
    runtime = build_runtime(
        tmp_path / "models.yml",
        tmp_path / "responses.yml",
        clock=MonotonicClock(now=asyncio.get_running_loop().time),
    )
    engine = runtime.state.models["sim"].engine
    await engine.start()
    streamed = {**BODY, "stream": True, "n": 4}
    try:
        exchanges = await asyncio.gather(*(call(runtime.app, "/v1/chat/completions", streamed) for _ in range(100)))
    finally:
        await engine.stop()
    codes = [status(ex) for ex in exchanges]
    assert 0 < codes.count(200) < 100
    assert set(codes) == {200, 503}
    for ex, code in zip(exchanges, codes, strict=True):
        text = b"".join(m.get("body", b"") for _, m in ex.sent[1:])
        if code == 503:
            assert json.loads(text)["error"]["code"] == 503
            continue
        assert b'"error"' not in text
        assert text.endswith(b"data: [DONE]\n\n")
        # 4 choices x 20 tokens, each token in its own chunk with its choice index.
        for index in range(4):
            assert text.count(b'"index":%d,"delta":{"content"' % index) == 20
