"""Every fault kind as real clients see it (openai SDK, httpx) from the real server (uvicorn, uvloop, httptools).

Timing checks are lower bounds only (a token never leaves before its deadline, whatever the load
on the machine); exact timings are checked in virtual time (tests/api/test_fault_responses.py).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.server import ServerProcess, free_port, running_server

pytestmark = pytest.mark.integration

CONFIG = """
version: 1
models:
  - name: fixed
    engine: fixed
    context_length: 2048
    latency: {ttft_overhead_ms: 50, itl_ms: 10}
    faults: {seed: 3, header_override: true, stall_ms: 400, slow_factor: 3}
  - name: rated
    engine: fixed
    context_length: 2048
    latency: {ttft_overhead_ms: 20, itl_ms: 20}
"""
RESPONSES = """
version: 1
responses:
  - id: long
    match: {contains: "story"}
    synthetic: {tokens: [30, 30]}
default:
  content: "Hi there, how can I help?"
"""
ADMIN_KEY = "admin-secret"
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hello!"}]
STORY: list[ChatCompletionMessageParam] = [{"role": "user", "content": "tell me a story"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(
        tmp_path_factory.mktemp("faults"),
        config=CONFIG,
        responses=RESPONSES,
        extra_args=["--log-level", "info", "--admin-key", ADMIN_KEY],
    ) as s:
        yield s


@pytest.fixture
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


def fault(kind: str, request_id: str) -> dict[str, str]:
    return {"x-llmsim-fault": kind, "x-request-id": request_id}


ERRORS = [
    (
        "rate_limit",
        openai.RateLimitError,
        429,
        {
            "message": "Rate limit reached for fixed in organization org-xxx on requests per min (RPM): "
            "Limit 3, Used 3, Requested 1.",
            "type": "RateLimitError",
            "param": None,
            "code": 429,
        },
        "1",
    ),
    (
        "server_error",
        openai.InternalServerError,
        500,
        {
            "message": "The server had an error while processing your request.",
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        },
        None,
    ),
    (
        "unavailable",
        openai.InternalServerError,
        503,
        {
            "message": "The engine is currently busy and cannot accept new requests. "
            "Please try again later or on a different instance.",
            "type": "ServiceUnavailableError",
            "param": None,
            "code": 503,
        },
        "1",
    ),
    (
        "bad_request",
        openai.BadRequestError,
        400,
        {
            "message": "Invalid request: missing required parameter 'model'.",
            "type": "BadRequestError",
            "param": "model",
            "code": 400,
        },
        None,
    ),
]


@pytest.mark.parametrize(("kind", "exc_type", "status", "error", "retry_after"), ERRORS)
@pytest.mark.parametrize("stream", [False, True])
def test_error_faults_through_the_openai_sdk(
    client: openai.OpenAI,
    kind: str,
    exc_type: type[openai.APIStatusError],
    status: int,
    error: dict[str, Any],
    retry_after: str | None,
    stream: bool,
) -> None:
    rid = f"sdk-{kind}-{stream}"
    with pytest.raises(exc_type) as info:
        client.chat.completions.create(model="fixed", messages=MESSAGES, stream=stream, extra_headers=fault(kind, rid))
    exc = info.value
    assert exc.status_code == status
    assert exc.body == error
    assert exc.response.headers.get("retry-after") == retry_after
    assert exc.response.headers["x-request-id"] == rid


@pytest.mark.parametrize(("kind", "exc_type", "status", "error", "retry_after"), ERRORS)
def test_error_faults_through_httpx(
    server: ServerProcess,
    kind: str,
    exc_type: type[openai.APIStatusError],
    status: int,
    error: dict[str, Any],
    retry_after: str | None,
) -> None:
    r = httpx.post(
        server.base_url + "/v1/completions",
        json={"model": "fixed", "prompt": "Hello!", "stream": True},
        headers=fault(kind, f"httpx-{kind}"),
    )
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"error": error}
    assert r.headers.get("retry-after") == retry_after
    assert r.headers["x-request-id"] == f"httpx-{kind}"


def test_abort_mid_stream_is_a_truncated_chunked_response(server: ServerProcess, client: openai.OpenAI) -> None:
    lines: list[str] = []

    def read() -> None:
        with httpx.stream(
            "POST",
            server.base_url + "/v1/chat/completions",
            json={"model": "fixed", "messages": STORY, "stream": True},
            headers=fault("abort_mid_stream", "drop-1"),
        ) as r:
            assert r.status_code == 200
            lines.extend(line for line in r.iter_lines() if line)

    with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
        read()
    chunks = [json.loads(line[len("data: ") :]) for line in lines]
    # Tokens came (fewer than the 30 planned), then the connection dropped: no finish reason, no [DONE].
    assert len(chunks) < 30
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    assert "data: [DONE]" not in lines
    # The openai SDK reports the drop as a connection error, mid-iteration.
    stream = client.chat.completions.create(
        model="fixed", messages=STORY, stream=True, extra_headers=fault("abort_mid_stream", "drop-2")
    )
    with pytest.raises(openai.APIConnectionError) as info:
        for _ in stream:
            pass
    # (The SDK's own HTTP stack raised it: the cause says what happened.)
    assert "incomplete chunked read" in str(info.value.__cause__)


def test_abort_mid_stream_without_streaming_drops_after_the_head(server: ServerProcess, client: openai.OpenAI) -> None:
    with httpx.stream(
        "POST",
        server.base_url + "/v1/completions",
        json={"model": "fixed", "prompt": "tell me a story"},
        headers=fault("abort_mid_stream", "drop-3"),
    ) as r:
        assert r.status_code == 200
        assert r.headers["x-request-id"] == "drop-3"
        with pytest.raises(httpx.RemoteProtocolError):
            r.read()
    with pytest.raises(openai.APIConnectionError):
        client.completions.create(model="fixed", prompt="tell me a story", extra_headers=fault("abort_mid_stream", "x"))


def stream_times(server: ServerProcess, kind: str, rid: str) -> tuple[float, list[float], list[str]]:
    """Send a streamed story with fault ``kind``: (start, arrival time of each token chunk, SSE lines)."""
    start = time.monotonic()
    times: list[float] = []
    lines: list[str] = []
    with httpx.stream(
        "POST",
        server.base_url + "/v1/completions",
        json={"model": "fixed", "prompt": "tell me a story", "stream": True, "max_tokens": 100},
        headers=fault(kind, rid),
        timeout=30,
    ) as r:
        for line in r.iter_lines():
            if line:
                lines.append(line)
                if line != "data: [DONE]":
                    times.append(time.monotonic())
    return start, times, lines


def test_a_stall_pauses_the_stream_by_at_least_stall_ms_then_it_ends_normally(server: ServerProcess) -> None:
    start, times, lines = stream_times(server, "stall", "stall-1")
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][len("data: ") :])["choices"][0]["finish_reason"] == "stop"
    assert len(times) == 30
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # One pause of 400 ms on the simulated timeline. Unstalled, the last token is due 50 + 29 x 10 =
    # 340 ms after the arrival; stalled, 740 ms at the earliest: tokens never leave early, lateness
    # only adds (so this bound is exact on a loaded machine too).
    assert times[-1] - start >= 0.74
    # The pause is one gap: 410 ms between two tokens, less the lateness of the token before it (a
    # loaded machine's: a fresh-clone run measured 398 ms), or, stalled before token 0, the TTFT.
    assert max(gaps) >= 0.3 or times[0] - start >= 0.45


@pytest.mark.parametrize("kind", ["stall", "slow"])
def test_stalled_and_slowed_streams_parse_whole_in_the_openai_sdk(client: openai.OpenAI, kind: str) -> None:
    start = time.monotonic()
    chunks = list(
        client.chat.completions.create(
            model="fixed", messages=STORY, stream=True, extra_headers=fault(kind, f"sdk-{kind}")
        )
    )
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert sum(1 for c in chunks if c.choices[0].delta.content) == 30
    # Unfaulted: 50 + 29 x 10 = 340 ms; a stall adds 400 ms, slow triples it (lower bounds only).
    assert time.monotonic() - start >= (0.74 if kind == "stall" else 1.02)


def test_slow_stretches_the_stream_by_the_factor(server: ServerProcess) -> None:
    start, times, lines = stream_times(server, "slow", "slow-1")
    assert lines[-1] == "data: [DONE]"
    # 3 x (50 + 29 x 10 ms) = 1.02 s at least, against 0.34 s for the same request unslowed.
    assert times[-1] - start >= 3 * (0.050 + 29 * 0.010)
    assert times[0] - start >= 3 * 0.050


def test_an_unknown_fault_header_is_a_400(server: ServerProcess) -> None:
    r = httpx.post(
        server.base_url + "/v1/completions", json={"model": "fixed", "prompt": "x"}, headers={"x-llmsim-fault": "melt"}
    )
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "x-llmsim-fault"


def test_the_header_is_ignored_where_header_override_is_off(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="rated", messages=MESSAGES, extra_headers=fault("server_error", "ign"))
    assert r.choices[0].message.content == "Hi there, how can I help?"


def metric(server: ServerProcess, kind: str, model: str = "fixed") -> float:
    text = httpx.get(server.base_url + "/metrics").text
    m = re.search(rf'llmsim_faults_injected_total{{engine="0",kind="{kind}",model_name="{model}"}} (\S+)', text)
    assert m is not None, kind
    return float(m.group(1))


def test_faults_are_counted_and_logged_with_the_request_id(server: ServerProcess) -> None:
    before = metric(server, "server_error")
    r = httpx.post(
        server.base_url + "/v1/completions",
        json={"model": "fixed", "prompt": "x"},
        headers=fault("server_error", "count-me"),
    )
    assert r.status_code == 500
    assert metric(server, "server_error") == before + 1
    deadline = time.monotonic() + 5
    while "fault server_error injected: model=fixed request_id=count-me" not in server.log():
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)


def admin(server: ServerProcess, method: str, body: Any = None, key: str | None = ADMIN_KEY) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.request(method, server.base_url + "/admin/faults", json=body, headers=headers)


async def test_admin_turns_a_fault_on_and_off_while_streams_run(server: ServerProcess) -> None:
    assert admin(server, "GET", key=None).status_code == 401
    assert admin(server, "GET", key="wrong").status_code == 401

    async def one_stream(http: httpx.AsyncClient) -> list[str]:
        body = {"model": "rated", "prompt": "tell me a story", "stream": True, "max_tokens": 100}
        async with http.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200
            return [line async for line in r.aiter_lines() if line]

    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
        # 30 tokens at 20 ms: each stream runs for ~0.6 s.
        running = [asyncio.create_task(one_stream(http)) for _ in range(5)]
        await asyncio.sleep(0.1)
        on = await asyncio.to_thread(admin, server, "PUT", {"rated": {"seed": 1, "rates": {"unavailable": 1.0}}})
        assert on.status_code == 200
        assert on.json()["rated"]["rates"]["unavailable"] == 1.0
        refused = await http.post("/v1/completions", json={"model": "rated", "prompt": "x"})
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert not any(t.done() for t in running)  # switched while they run
        off = await asyncio.to_thread(admin, server, "PUT", {"rated": {}})
        assert off.json()["rated"]["rates"]["unavailable"] == 0.0
        served = await http.post("/v1/completions", json={"model": "rated", "prompt": "x"})
        assert served.status_code == 200
        # The streams that ran meanwhile were never touched: each ends normally.
        for lines in await asyncio.gather(*running):
            assert lines[-1] == "data: [DONE]"
            assert json.loads(lines[-2][len("data: ") :])["choices"][0]["finish_reason"] == "stop"
    assert metric(server, "unavailable", model="rated") == 1


def test_crash_exits_the_process_with_a_clear_log_line(tmp_path: Path) -> None:
    (tmp_path / "models.yml").write_text(CONFIG)
    port = free_port()
    log = tmp_path / "crash.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llmsim.cli",
                "serve",
                "--config",
                str(tmp_path / "models.yml"),
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.05)
        client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(model="fixed", messages=MESSAGES, extra_headers=fault("crash", "last-words"))
        assert proc.wait(timeout=10) == 70
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "crash fault injected: model=fixed request_id=last-words: exiting with status 70" in log.read_text()
