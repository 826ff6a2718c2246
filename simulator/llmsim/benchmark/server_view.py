"""The server's own view of a run: llmsim's ``/metrics/summary`` (reset after warm-up), read over HTTP.

Other servers (vLLM, a gateway) have no such endpoint: the view is then simply absent.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from llmsim.benchmark.client import base_url


async def reset(http: aiohttp.ClientSession, url: str) -> bool:
    """``DELETE /metrics/summary``; False when the server has no such endpoint."""
    try:
        async with http.delete(base_url(url) + "/metrics/summary") as resp:
            await resp.read()
            return resp.status == 200
    except aiohttp.ClientError:
        return False


async def settle(http: aiohttp.ClientSession, url: str, patience: float = 2.0) -> None:
    """Wait until the server has nothing in flight (vLLM's ``GET /load`` is 0), at most ``patience`` seconds.

    A client that hung up has its request counted once the server notices the disconnect, a moment
    after the client's run is over: read the summary before that and it is one request short.
    """
    loop = asyncio.get_running_loop()
    until = loop.time() + patience
    while loop.time() < until:
        try:
            async with http.get(base_url(url) + "/load") as resp:
                body: Any = await resp.json(content_type=None) if resp.status == 200 else None
        except (aiohttp.ClientError, ValueError):
            return
        if not isinstance(body, dict) or body.get("server_load") == 0:
            return
        await asyncio.sleep(0.02)


async def fetch(http: aiohttp.ClientSession, url: str, model: str) -> dict[str, Any] | None:
    """One model's summary (counts, and p50/p90/p99/max of ttft, itl, e2e, queue_time, lag in seconds)."""
    await settle(http, url)
    try:
        async with http.get(base_url(url) + "/metrics/summary") as resp:
            if resp.status != 200:
                return None
            data: Any = await resp.json(content_type=None)
    except (aiohttp.ClientError, ValueError):
        return None
    model_view = data.get("models", {}).get(model) if isinstance(data, dict) else None
    return model_view if isinstance(model_view, dict) else None
