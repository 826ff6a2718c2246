"""A huge prompt never holds the other requests up: refused early, tokenized off the event loop (real server)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from llmsim.api.state import DEFAULT_MAX_REQUEST_BYTES
from tests.support.server import running_server

pytestmark = pytest.mark.integration

# Prose of about 3.5 MiB: just under the default body limit, ~800,000 tokens (past any context).
PROMPT = "The quick brown fox jumps over the lazy dog, again and again. " * 58_000
# Before the fix a 20 MB prompt held /health for 1.8 s, a 1 MB one for ~180 ms. Measured by the probe
# (its own scheduling included, on 2 shared cores): nearly every answer within 50 ms, none past 100 ms.
HEALTH_P90_BOUND_S = 0.050
HEALTH_MAX_BOUND_S = 0.100


async def probe(client: httpx.AsyncClient, stop: asyncio.Event) -> list[float]:
    out: list[float] = []
    while not stop.is_set():
        t = time.perf_counter()
        assert (await client.get("/health")).status_code == 200
        out.append(time.perf_counter() - t)
        await asyncio.sleep(0.005)
    return out


def test_a_huge_prompt_does_not_stall_the_others(tmp_path: Path) -> None:
    body = json.dumps({"model": "instant-model", "messages": [{"role": "user", "content": PROMPT}]})
    assert len(body) < DEFAULT_MAX_REQUEST_BYTES

    async def scenario(base_url: str) -> tuple[list[float], httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
            await client.get("/health")
            stop = asyncio.Event()
            probing = asyncio.create_task(probe(client, stop))
            await asyncio.sleep(0.1)
            headers = {"content-type": "application/json"}
            big = await client.post("/v1/chat/completions", content=body, headers=headers)
            too_big = await client.post(
                "/v1/chat/completions", content=body + " " * DEFAULT_MAX_REQUEST_BYTES, headers=headers
            )
            await asyncio.sleep(0.1)
            stop.set()
            return await probing, big, too_big

    with running_server(tmp_path) as server:
        latencies, big, too_big = asyncio.run(scenario(server.base_url))
    # Counted in full and refused as vLLM refuses it: the exact count is in the message.
    assert big.status_code == 400
    # Per repetition 12 words (each with its leading space) and 2 punctuation marks: 14 tokens; the
    # text's final space is one more; the chat template adds 4 around the message and 3 for the reply.
    tokens = 14 * 58_000 + 1 + 4 + 3
    assert f"your prompt contains {tokens} input tokens" in big.json()["error"]["message"]
    assert too_big.status_code == 413
    ordered = sorted(latencies)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    assert p90 < HEALTH_P90_BOUND_S, f"/health p90 {p90 * 1000:.1f} ms"
    assert ordered[-1] < HEALTH_MAX_BOUND_S, f"/health took up to {ordered[-1] * 1000:.1f} ms"
