"""The verdict's run: start the replicas' fault timelines, send a bounded workload through the gateway, collect.

Over HTTP only, as the rest of the benchmark client: ``POST /admin/timeline/start`` on every
replica (each told its ordinal, its place in the list, and the fleet's size), an open loop of
chat completions at a fixed rate through the gateway, then ``GET /admin/timeline`` and
``/admin/timeline/requests`` from every replica.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from llmsim.benchmark.client import base_url, sleep_until
from llmsim.benchmark.verdict import ClientRecord, ReplicaRecord

#: Header naming the replica that answered (llmsim serve --pod-name).
POD_HEADER = "x-llmsim-pod"
#: The same, as a LiteLLM proxy passes it on (it prefixes the provider's response headers).
LITELLM_POD_HEADER = f"llm_provider-{POD_HEADER}"


@dataclass(frozen=True, slots=True)
class VerdictRun:
    """What to run. ``replicas``: each replica's base URL, in ordinal order."""

    gateway: str
    replicas: Sequence[str]
    model: str
    rate: float
    duration: float
    admin_key: str | None = None
    api_key: str | None = None
    max_tokens: int = 8
    timeout: float = 10.0
    # False: the timelines were started by someone else (their time 0 is then not the client's).
    start: bool = True
    # Requests sent one after another before the start, and not judged: a gateway's first calls
    # set up its clients (LiteLLM's first answers take seconds), which is not what is tested.
    warmup: int = 0


def _headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


async def _start(session: aiohttp.ClientSession, run: VerdictRun) -> float:
    """Start every replica's timeline together; the client's time 0 is the middle of the calls."""
    n = len(run.replicas)

    async def one(i: int, url: str) -> None:
        async with session.post(
            f"{base_url(url)}/admin/timeline/start",
            json={"ordinal": i, "replicas": n},
            headers=_headers(run.admin_key),
        ) as response:
            if response.status != 200:
                raise RuntimeError(f"{url}: POST /admin/timeline/start: {response.status} {await response.text()}")

    before = time.monotonic()
    await asyncio.gather(*(one(i, url) for i, url in enumerate(run.replicas)))
    return (before + time.monotonic()) / 2


async def _send(
    session: aiohttp.ClientSession, run: VerdictRun, t0: float, at: float, records: list[ClientRecord]
) -> None:
    await sleep_until(t0 + at)
    await _request(session, run, t0, records)


async def _request(session: aiohttp.ClientSession, run: VerdictRun, t0: float, records: list[ClientRecord]) -> None:
    sent = time.monotonic()
    body = {
        "model": run.model,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": run.max_tokens,
    }
    try:
        async with session.post(
            f"{base_url(run.gateway)}/v1/chat/completions",
            json=body,
            headers=_headers(run.api_key),
            timeout=aiohttp.ClientTimeout(total=run.timeout),
        ) as response:
            await response.read()
            records.append(
                ClientRecord(
                    sent - t0,
                    response.status,
                    time.monotonic() - sent,
                    response.headers.get(POD_HEADER) or response.headers.get(LITELLM_POD_HEADER),
                )
            )
    except (aiohttp.ClientError, TimeoutError) as exc:
        records.append(ClientRecord(sent - t0, 0, time.monotonic() - sent, None, f"{type(exc).__name__}: {exc}"))


async def _collect(session: aiohttp.ClientSession, run: VerdictRun) -> list[ReplicaRecord]:
    out = []
    for i, url in enumerate(run.replicas):
        headers = _headers(run.admin_key)
        async with session.get(f"{base_url(url)}/admin/timeline", headers=headers) as response:
            state: dict[str, Any] = await response.json()
            name = response.headers.get(POD_HEADER) or url
        async with session.get(f"{base_url(url)}/admin/timeline/requests", headers=headers) as response:
            requests: dict[str, Any] = await response.json()
        if run.model not in state:
            raise RuntimeError(f"{url} does not serve {run.model!r} (it serves {', '.join(state)})")
        out.append(ReplicaRecord(name, i, state[run.model], requests[run.model]))
    return out


async def verdict_run(run: VerdictRun) -> tuple[list[ReplicaRecord], list[ClientRecord]]:
    """Start, send ``rate`` requests a second for ``duration`` seconds (open loop), wait for the answers, collect."""
    records: list[ClientRecord] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        warmup: list[ClientRecord] = []
        for _ in range(run.warmup):
            await _request(session, run, time.monotonic(), warmup)
        t0 = await _start(session, run) if run.start else time.monotonic()
        count = int(run.rate * run.duration)
        await asyncio.gather(*(_send(session, run, t0, i / run.rate, records) for i in range(count)))
        replicas = await _collect(session, run)
    records.sort(key=lambda r: r.sent)
    return replicas, records
