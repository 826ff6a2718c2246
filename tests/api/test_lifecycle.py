"""Startup readiness, sleep mode and the shutdown drain, through the app in virtual time.

The fixed engine runs with TTFT 100 ms and ITL 10 ms; every answer is 50 tokens, so a stream
takes 100 + 49 x 10 = 590 ms from its arrival.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from llmsim.engine import MonotonicClock
from llmsim.runtime import Runtime, build_runtime
from tests.api.asgi_driver import Exchange, call

RESPONSES = """
version: 1
responses: []
default:
  synthetic: {tokens: [50, 50]}
"""
MODEL = """
models:
  - name: fixed
    engine: fixed
    context_length: 4096
    latency: {ttft_overhead_ms: 100, itl_ms: 10}
"""
N, TTFT, ITL = 50, 0.100, 0.010
CHAT = "/v1/chat/completions"


def chat(stream: bool = True) -> dict[str, Any]:
    return {"model": "fixed", "messages": [{"role": "user", "content": "hello"}], "stream": stream}


async def started(tmp_path: Path, startup_seconds: float = 0.0) -> AsyncIterator[Runtime]:
    (tmp_path / "models.yml").write_text(f"version: 1\nstartup_seconds: {startup_seconds}\n{MODEL}")
    (tmp_path / "responses.yml").write_text(RESPONSES)
    clock = MonotonicClock(now=asyncio.get_running_loop().time)
    runtime = build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml", clock=clock)
    async with runtime.app.router.lifespan_context(runtime.app):
        yield runtime


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    async for r in started(tmp_path):
        yield r


async def get(runtime: Runtime, path: str) -> Exchange:
    return await call(runtime.app, path, None, method="GET")


def events(ex: Exchange) -> list[Any]:
    return [
        json.loads(e[len(b"data: ") :]) if e != b"data: [DONE]" else "[DONE]"
        for e in ex.body.split(b"\n\n")
        if e.startswith(b"data: ")
    ]


def finish_reasons(ex: Exchange) -> list[str]:
    return [c["choices"][0]["finish_reason"] for c in events(ex)[:-1] if c["choices"][0]["finish_reason"]]


@pytest.mark.looptime
async def test_health_is_503_until_the_simulated_load_is_done(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    async for runtime in started(tmp_path, startup_seconds=30):
        t0 = loop.time()
        assert (await get(runtime, "/health")).start["status"] == 503
        # llm-d-inference-sim's readiness paths answer as /health does.
        assert (await get(runtime, "/ready")).start["status"] == 503
        assert (await get(runtime, "/health/ready")).start["status"] == 503
        assert (await get(runtime, "/ping")).start["status"] == 200  # alive, not ready
        refused = await call(runtime.app, CHAT, chat())
        assert refused.start["status"] == 503
        assert (b"retry-after", b"30") in refused.start["headers"]
        assert (
            json.loads(refused.body)["error"]["message"] == "The model is still loading: the server is not ready yet."
        )
        await asyncio.sleep(29.5)
        assert (await get(runtime, "/health")).start["status"] == 503
        retry = await call(runtime.app, CHAT, chat())
        assert (b"retry-after", b"1") in retry.start["headers"]  # 0.5 s left, rounded up
        await asyncio.sleep(0.5)
        assert loop.time() - t0 == pytest.approx(30.0)
        assert (await get(runtime, "/health")).start["status"] == 200
        assert (await get(runtime, "/ready")).start["status"] == 200
        assert (await get(runtime, "/health/ready")).start["status"] == 200
        served = await call(runtime.app, CHAT, chat())
        assert served.start["status"] == 200
        assert finish_reasons(served) == ["stop"]


@pytest.mark.looptime
async def test_sleep_aborts_running_streams_and_queues_new_requests_until_wake_up(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    running = asyncio.create_task(call(runtime.app, CHAT, chat()))
    await asyncio.sleep(0.2)  # token 10 is out
    slept = await call(runtime.app, "/sleep?level=1", {})
    assert json.loads(slept.body) == {"status": "sleeping", "level": 1}
    ex = await running
    # As vLLM: the aborted stream ends with a final chunk, finish reason "abort", then [DONE].
    assert finish_reasons(ex) == ["abort"]
    assert events(ex)[-1] == "[DONE]"
    assert json.loads((await get(runtime, "/is_sleeping")).body) == {"is_sleeping": True}
    assert (await get(runtime, "/health")).start["status"] == 200  # asleep is not unhealthy (vLLM)

    queued = asyncio.create_task(call(runtime.app, CHAT, chat()))
    await asyncio.sleep(5.0)
    assert not queued.done()
    woke_at = loop.time()
    awake = await call(runtime.app, "/wake_up", {})
    assert json.loads(awake.body) == {"status": "awake", "tags": None}
    ex = await queued
    assert finish_reasons(ex) == ["stop"]
    # Its timeline starts at the wake-up: first token 100 ms later, the last 590 ms later.
    body_times = [t for t, m in ex.sent if m["type"] == "http.response.body"]
    assert body_times[0] - woke_at == pytest.approx(TTFT)
    assert body_times[-1] - woke_at == pytest.approx(TTFT + (N - 1) * ITL)
    assert json.loads((await get(runtime, "/is_sleeping")).body) == {"is_sleeping": False}


@pytest.mark.looptime
async def test_sleep_mode_wait_lets_running_requests_finish_first(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    running = asyncio.create_task(call(runtime.app, CHAT, chat(stream=False)))
    await asyncio.sleep(0.2)
    slept = await call(runtime.app, "/sleep?level=0&mode=wait", {})
    # The sleep returns once the running request is done (590 ms after it arrived).
    assert loop.time() - t0 == pytest.approx(TTFT + (N - 1) * ITL)
    assert json.loads(slept.body) == {"status": "sleeping", "level": 0}
    body = json.loads((await running).body)
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == N
    assert json.loads((await call(runtime.app, "/wake_up?tags=scheduling", {})).body) == {
        "status": "awake",
        "tags": ["scheduling"],
    }


@pytest.mark.looptime
async def test_a_non_streamed_request_cut_by_sleep_gets_finish_reason_abort(runtime: Runtime) -> None:
    running = asyncio.create_task(call(runtime.app, CHAT, chat(stream=False)))
    await asyncio.sleep(TTFT + 4 * ITL + 0.001)  # tokens 0..4 are out
    await call(runtime.app, "/sleep", {})
    body = json.loads((await running).body)
    assert body["choices"][0]["finish_reason"] == "abort"
    assert body["usage"]["completion_tokens"] == 5


@pytest.mark.looptime
async def test_wake_up_by_tags_is_partial_until_every_tag_is_awake(runtime: Runtime) -> None:
    await call(runtime.app, "/sleep?level=2", {})
    partial = await call(runtime.app, "/wake_up?tags=weights", {})
    assert json.loads(partial.body) == {"status": "sleeping", "tags": ["weights"]}
    assert runtime.state.lifecycle.sleeping == {"kv_cache"}
    done = await call(runtime.app, "/wake_up?tags=kv_cache", {})
    assert json.loads(done.body) == {"status": "awake", "tags": ["kv_cache"]}


@pytest.mark.looptime
@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("/sleep?level=3", "level"),
        ("/sleep?level=x", "level"),
        ("/sleep?mode=keep", "mode"),
        ("/wake_up?tags=gpu", "tags"),
    ],
)
async def test_bad_sleep_arguments_are_400s(runtime: Runtime, path: str, param: str) -> None:
    ex = await call(runtime.app, path, {})
    assert ex.start["status"] == 400
    assert json.loads(ex.body)["error"]["param"] == param
    assert not runtime.state.lifecycle.sleeping


@pytest.mark.looptime
async def test_drain_lets_streams_finish_within_the_grace(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    streams = [asyncio.create_task(call(runtime.app, CHAT, chat())) for _ in range(3)]
    await asyncio.sleep(0.05)
    drain = asyncio.create_task(runtime.state.lifecycle.drain(grace=2.0))
    await asyncio.sleep(0.01)
    assert (await get(runtime, "/health")).start["status"] == 503
    refused = await call(runtime.app, CHAT, chat())
    assert refused.start["status"] == 503
    assert json.loads(refused.body)["error"]["message"] == "The server is shutting down."
    await drain
    assert loop.time() - t0 == pytest.approx(TTFT + (N - 1) * ITL)  # done when the streams were, not at the grace
    for task in streams:
        assert finish_reasons(task.result()) == ["stop"]


@pytest.mark.looptime
async def test_drain_aborts_what_is_still_running_at_the_grace(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    streams = [asyncio.create_task(call(runtime.app, CHAT, chat())) for _ in range(3)]
    await asyncio.sleep(0.05)
    t0 = loop.time()
    await runtime.state.lifecycle.drain(grace=0.2)
    assert loop.time() - t0 == pytest.approx(0.2)
    for task in streams:
        ex = await task
        assert ex.complete
        assert finish_reasons(ex) == ["abort"]
        assert events(ex)[-1] == "[DONE]"
    assert runtime.metrics.summary()["models"]["fixed"]["requests"]["abort"] == 3


@pytest.mark.looptime
async def test_drain_waits_for_token_in_token_out_streams_too(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    body = {"model": "fixed", "token_ids": [11, 12, 13], "sampling_params": {}, "stream": True}
    streams = [asyncio.create_task(call(runtime.app, "/inference/v1/generate", body)) for _ in range(2)]
    await asyncio.sleep(0.05)
    drain = asyncio.create_task(runtime.state.lifecycle.drain(grace=2.0))
    await asyncio.sleep(0.01)
    refused = await call(runtime.app, "/inference/v1/generate", body)
    assert refused.start["status"] == 503
    await drain
    assert loop.time() - t0 == pytest.approx(TTFT + (N - 1) * ITL)  # done when the streams were
    for task in streams:
        chunks = events(task.result())
        assert chunks[-1] == "[DONE]"
        assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]][-1] == "stop"
        assert len(chunks) == N + 1
