"""Faults through the app, in virtual time: when stalled and slowed tokens leave, what a dropped stream sent, /admin/faults.

The fixed engine runs with TTFT 100 ms and ITL 10 ms on the loop's virtual clock; the script
answers "Hi there, how can I help?" (8 tokens), so token ``i`` is due at 100 + 10 i ms.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, NoReturn

import pytest

from llmsim.engine import MonotonicClock
from llmsim.runtime import Runtime, build_runtime
from llmsim.transport.dropped_connection import DropConnection
from tests.api.asgi_driver import Exchange, call

CONFIG = """
version: 1
models:
  - name: fixed
    engine: fixed
    context_length: 1024
    latency: {ttft_overhead_ms: 100, itl_ms: 10}
    faults: {seed: 5, header_override: true, stall_ms: 500, slow_factor: 3}
  - name: other
    engine: instant
"""
RESPONSES = """
version: 1
responses: []
default:
  content: "Hi there, how can I help?"
"""
N_TOKENS = 8
TTFT, ITL = 0.100, 0.010
CHAT = "/v1/chat/completions"


class Crashed(BaseException):
    """Stands in for os._exit: nothing after it runs (no error response either)."""


def crash(message: str) -> NoReturn:
    raise Crashed(message)


@pytest.fixture
async def runtime(tmp_path: Path) -> Runtime:
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    clock = MonotonicClock(now=asyncio.get_running_loop().time)
    return build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml", clock=clock, crash=crash)


def chat(stream: bool = True, model: str = "fixed") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], "stream": stream}


def fault(kind: str, request_id: str | None = None) -> list[tuple[bytes, bytes]]:
    headers = [(b"x-llmsim-fault", kind.encode())]
    if request_id is not None:
        headers.append((b"x-request-id", request_id.encode()))
    return headers


def token_chunks(ex: Exchange) -> list[dict[str, Any]]:
    events = [e for e in ex.body.split(b"\n\n") if e.startswith(b"data: {")]
    return [json.loads(e[len(b"data: ") :]) for e in events]


@pytest.mark.looptime
async def test_a_stall_pauses_the_stream_once_by_stall_ms(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    base = [TTFT + i * ITL for i in range(N_TOKENS)]
    stalled_at = []
    for _ in range(2):
        start = loop.time()
        ex = await call(runtime.app, CHAT, chat(), headers=fault("stall", "same-id"))
        times = [t - start for t, m in ex.sent if m["type"] == "http.response.body"][:N_TOKENS]
        k = next(i for i, (t, b) in enumerate(zip(times, base, strict=True)) if t != pytest.approx(b))
        # Before token k: on time; from k on: exactly 500 ms later (the pause, on the simulated timeline).
        assert times == pytest.approx([b + (0.5 if i >= k else 0.0) for i, b in enumerate(base)])
        assert ex.body.endswith(b"data: [DONE]\n\n")
        stalled_at.append(k)
    # The same request id stalls at the same token.
    assert stalled_at[0] == stalled_at[1]
    assert 0 <= stalled_at[0] < N_TOKENS


@pytest.mark.looptime
async def test_slow_stretches_the_whole_timeline_by_the_factor(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    ex = await call(runtime.app, CHAT, chat(), headers=fault("slow"))
    times = [t - start for t, m in ex.sent if m["type"] == "http.response.body"][:N_TOKENS]
    assert times == pytest.approx([3 * (TTFT + i * ITL) for i in range(N_TOKENS)])
    # The fixed engine's own timeline is the slowed one: the metrics see it too.
    ttft = runtime.metrics.models["fixed"].ttft
    assert ttft.sum == pytest.approx(3 * TTFT)


@pytest.mark.looptime
async def test_abort_mid_stream_sends_some_tokens_then_drops_the_connection(runtime: Runtime) -> None:
    ex = Exchange()
    with pytest.raises(DropConnection):
        await call(runtime.app, CHAT, chat(), ex, headers=fault("abort_mid_stream"))
    assert ex.start["status"] == 200
    assert not ex.complete  # no end of body: the server closes the connection instead
    chunks = token_chunks(ex)
    texts = [c["choices"][0]["delta"].get("content", "") for c in chunks]
    sent = "".join(texts)
    assert "Hi there, how can I help?".startswith(sent)
    assert sent != "Hi there, how can I help?"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    assert b"[DONE]" not in ex.body
    # The engine request was aborted, not left running.
    assert runtime.state.models["fixed"].engine.snapshot().num_running == 0
    assert runtime.metrics.summary()["models"]["fixed"]["requests"]["abort"] == 1


@pytest.mark.looptime
async def test_abort_mid_stream_without_streaming_sends_the_head_then_drops(runtime: Runtime) -> None:
    ex = Exchange()
    with pytest.raises(DropConnection):
        await call(runtime.app, CHAT, chat(stream=False), ex, headers=fault("abort_mid_stream"))
    (start,) = [m for _, m in ex.sent]
    assert start["type"] == "http.response.start"
    assert start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"application/json"
    assert b"content-length" not in headers


@pytest.mark.looptime
async def test_crash_ends_the_process_before_anything_is_sent(runtime: Runtime) -> None:
    ex = Exchange()
    with pytest.raises(Crashed, match="model=fixed request_id=boom"):
        await call(runtime.app, CHAT, chat(), ex, headers=fault("crash", "boom"))
    assert ex.sent == []


@pytest.mark.looptime
async def test_the_header_is_ignored_by_a_model_without_header_override(runtime: Runtime) -> None:
    ex = await call(runtime.app, CHAT, chat(model="other"), headers=fault("server_error"))
    assert ex.start["status"] == 200
    assert ex.body.endswith(b"data: [DONE]\n\n")


async def admin(runtime: Runtime, method: str, body: Any = None) -> tuple[int, Any]:
    ex = await call(runtime.app, "/admin/faults", body, method=method)
    return ex.start["status"], json.loads(ex.body)


@pytest.mark.looptime
async def test_admin_faults_reads_and_replaces_a_models_settings(runtime: Runtime) -> None:
    status, current = await admin(runtime, "GET")
    assert status == 200
    assert current["fixed"] == {
        "seed": 5,
        "rates": dict.fromkeys(
            ["rate_limit", "server_error", "unavailable", "bad_request", "abort_mid_stream", "stall", "slow", "crash"],
            0.0,
        ),
        "stall_ms": 500.0,
        "slow_factor": 3.0,
        "header_override": True,
        "unhealthy": False,
    }
    status, after = await admin(runtime, "PUT", {"other": {"rates": {"server_error": 1.0}}})
    assert status == 200
    assert after["other"]["rates"]["server_error"] == 1.0
    assert after["fixed"] == current["fixed"]  # not named: unchanged
    ex = await call(runtime.app, CHAT, chat(model="other"))
    assert ex.start["status"] == 500
    assert json.loads(ex.body)["error"]["message"] == "The server had an error while processing your request."
    status, _ = await admin(runtime, "PUT", {"other": {}})
    assert status == 200
    assert (await call(runtime.app, CHAT, chat(model="other"))).start["status"] == 200
    assert runtime.metrics.models["other"].faults_injected["server_error"] == 1


@pytest.mark.looptime
@pytest.mark.parametrize(
    ("body", "status", "param", "message"),
    [
        ({"other": {"rates": {"rate_limit": 2}}}, 400, "other.rates.rate_limit", "less than or equal to 1"),
        ({"other": {"rates": {"teapot": 0.1}}}, 400, "other.rates.teapot", "unknown field"),
        ({"other": {"rates": {"stall": 0.7, "slow": 0.7}}}, 400, "other.rates", "the rates add up to 1.4"),
        ({"other": {"rates": {"stall": 0.5}}, "nope": {}}, 404, "model", "The model `nope` does not exist."),
        ([1, 2], 400, None, "expected a JSON object keyed by model name"),
    ],
)
async def test_a_bad_put_is_refused_whole(
    runtime: Runtime, body: Any, status: int, param: str | None, message: str
) -> None:
    code, answer = await admin(runtime, "PUT", body)
    assert code == status
    assert answer["error"]["param"] == param
    assert message in answer["error"]["message"]
    # Nothing applied, not even the valid entry before the bad one.
    assert not runtime.state.models["other"].faults.enabled


GENERATE = "/inference/v1/generate"


def generate(stream: bool = True) -> dict[str, Any]:
    return {"model": "fixed", "token_ids": [11, 12, 13], "sampling_params": {}, "stream": stream}


@pytest.mark.looptime
async def test_token_in_token_out_meets_the_same_faults(runtime: Runtime) -> None:
    limited = await call(runtime.app, GENERATE, generate(), headers=fault("rate_limit"))
    assert limited.start["status"] == 429
    assert json.loads(limited.body)["error"]["type"] == "RateLimitError"
    loop = asyncio.get_running_loop()
    start = loop.time()
    slow = await call(runtime.app, GENERATE, generate(), headers=fault("slow"))
    times = [t - start for t, m in slow.sent if m["type"] == "http.response.body"][:N_TOKENS]
    assert times == pytest.approx([3 * (TTFT + i * ITL) for i in range(N_TOKENS)])
    dropped = Exchange()
    with pytest.raises(DropConnection):
        await call(runtime.app, GENERATE, generate(), dropped, headers=fault("abort_mid_stream"))
    assert b"[DONE]" not in dropped.body
    assert runtime.state.models["fixed"].engine.snapshot().num_running == 0
