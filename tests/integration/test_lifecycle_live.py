"""The real server's life: ready late (startup_seconds), asleep and awake, and SIGTERM with 20 live streams."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.support.server import ServerProcess, running_server

pytestmark = pytest.mark.integration

RESPONSES = """
version: 1
responses: []
default:
  synthetic: {tokens: [100, 100]}
"""


def config(startup_seconds: float = 0.0) -> str:
    return f"""
version: 1
startup_seconds: {startup_seconds}
models:
  - name: fixed
    engine: fixed
    context_length: 4096
    latency: {{ttft_overhead_ms: 50, itl_ms: 20}}
"""


def test_binds_at_once_and_is_ready_after_startup_seconds(tmp_path: Path) -> None:
    t0 = time.monotonic()
    # 3 s: room for the server's own start (it counts from its config load) on a busy machine.
    with running_server(tmp_path, config=config(startup_seconds=3), ready_path="/ping") as server:
        # Liveness answers while the simulated load runs; readiness does not.
        assert httpx.get(server.base_url + "/health").status_code == 503
        r = httpx.post(server.base_url + "/v1/completions", json={"model": "fixed", "prompt": "x"})
        assert r.status_code == 503
        assert 1 <= int(r.headers["retry-after"]) <= 3
        while httpx.get(server.base_url + "/health").status_code != 200:
            assert time.monotonic() - t0 < 30, server.log()
            time.sleep(0.02)
        # Never ready before the load is done (the process started after t0).
        assert time.monotonic() - t0 >= 3
        r = httpx.post(server.base_url + "/v1/completions", json={"model": "fixed", "prompt": "x", "max_tokens": 3})
        assert r.status_code == 200


def test_sleep_and_wake_up_as_vllm_answers_them(tmp_path: Path) -> None:
    with running_server(tmp_path, config=config(), responses=RESPONSES) as server:
        base = server.base_url
        assert httpx.post(base + "/sleep", params={"level": 1}).json() == {"status": "sleeping", "level": 1}
        assert httpx.get(base + "/is_sleeping").json() == {"is_sleeping": True}
        # Accepted while asleep: the answer comes once the server wakes up.
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(base + "/v1/completions", json={"model": "fixed", "prompt": "x", "max_tokens": 2}, timeout=0.5)
        woke = httpx.post(base + "/wake_up", params=[("tags", "weights"), ("tags", "kv_cache")])
        assert woke.json() == {"status": "awake", "tags": ["weights", "kv_cache"]}
        assert httpx.get(base + "/is_sleeping").json() == {"is_sleeping": False}
        r = httpx.post(base + "/v1/completions", json={"model": "fixed", "prompt": "x", "max_tokens": 2})
        assert r.json()["choices"][0]["finish_reason"] == "length"


async def read_stream(http: httpx.AsyncClient, started: asyncio.Event, counter: list[int]) -> list[str]:
    body = {"model": "fixed", "messages": [{"role": "user", "content": "go"}], "stream": True}
    lines: list[str] = []
    async with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line:
                continue
            lines.append(line)
            if len(lines) == 2:  # role chunk and a first token: live
                counter[0] += 1
                if counter[0] == 20:
                    started.set()
    return lines


def ending(lines: list[str]) -> tuple[str | None, str]:
    """The finish reason of the last chunk before [DONE], and the last line."""
    last_chunk = json.loads(lines[-2][len("data: ") :])
    return last_chunk["choices"][0]["finish_reason"], lines[-1]


async def sigterm_during_20_streams(server: ServerProcess) -> tuple[list[list[str] | BaseException], float]:
    started = asyncio.Event()
    counter = [0]
    limits = httpx.Limits(max_connections=40)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30, limits=limits) as http:
        tasks = [asyncio.create_task(read_stream(http, started, counter)) for _ in range(20)]
        await asyncio.wait_for(started.wait(), 30)
        server.process.send_signal(signal.SIGTERM)
        t_term = time.monotonic()
        # None hangs: every stream ends well within the bound.
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
    return results, t_term


async def test_sigterm_with_no_grace_ends_every_stream_with_an_abort_chunk(tmp_path: Path) -> None:
    with running_server(tmp_path, config=config(), responses=RESPONSES) as server:
        results, _ = await sigterm_during_20_streams(server)
        for lines in results:
            assert isinstance(lines, list), lines
            assert ending(lines) == ("abort", "data: [DONE]")
            assert len(lines) < 1 + 100 + 1  # cut short: fewer than the 100 tokens
        # Exits (uvicorn re-raises the SIGTERM it handled: killed by it, as a shell would report 143).
        assert await asyncio.to_thread(server.process.wait, 15) == -signal.SIGTERM


async def test_sigterm_with_a_grace_lets_every_stream_finish_and_refuses_new_connections(tmp_path: Path) -> None:
    with running_server(
        tmp_path, config=config(), responses=RESPONSES, extra_args=["--shutdown-timeout", "30"]
    ) as server:
        started = asyncio.Event()
        counter = [0]
        async with httpx.AsyncClient(
            base_url=server.base_url, timeout=30, limits=httpx.Limits(max_connections=40)
        ) as http:
            tasks = [asyncio.create_task(read_stream(http, started, counter)) for _ in range(20)]
            await asyncio.wait_for(started.wait(), 30)
            server.process.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            # Stopped accepting: a new connection is refused while the 20 streams still run.
            assert not all(t.done() for t in tasks)
            with pytest.raises(httpx.ConnectError):
                await asyncio.to_thread(httpx.get, server.base_url + "/health")
            results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        for lines in results:
            assert isinstance(lines, list), lines
            assert ending(lines) == ("stop", "data: [DONE]")
            assert len(lines) == 1 + 100 + 1  # role chunk, 100 tokens (the last carries "stop"), [DONE]
        assert await asyncio.to_thread(server.process.wait, 15) == -signal.SIGTERM
