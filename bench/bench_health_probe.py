"""/health while one client does its worst: does a health checker still get its answer in time?

A load balancer's or kubelet's probe must not time out because one client is slow, stalled or
sends something huge. Each scenario starts a fresh `llmsim serve`, opens the probe's keep-alive
connection, measures /health alone (the baseline, same run), then again while the scenario runs:

- ``stalled-readers``: 50 streamed requests of 32,000 instant tokens whose clients never read
  (small receive windows): the server must write in bounded batches and wait on the transport;
- ``huge-prompt``: a 3.5 MiB chat prompt (just under the body limit), counted and refused with a
  400, and one over the limit (413): tokenizing must not hold the event loop.

Goal: /health p99 under 50 ms during each scenario. Prints a table and writes
bench/results/health_probe.json.

    .venv/bin/python bench/bench_health_probe.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.clients import stalled_stream  # noqa: E402
from tests.support.server import running_server  # noqa: E402

P99_GOAL_S = 0.050
STALLED_STREAMS = 50
STALLED_MAX_TOKENS = 32_000
HUGE_PROMPT = "The quick brown fox jumps over the lazy dog, again and again. " * 58_000
MAX_REQUEST_BYTES = 4 * 2**20


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


async def probe(client: httpx.AsyncClient, seconds: float) -> list[float]:
    """Sequential /health requests, 10 ms apart, for ``seconds``: each one's latency."""
    out: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        r = await client.get("/health")
        out.append(time.perf_counter() - t)
        if r.status_code != 200:
            raise RuntimeError(f"/health answered {r.status_code}")
        await asyncio.sleep(0.01)
    return out


async def stalled_readers(port: int, client: httpx.AsyncClient, seconds: float) -> list[float]:
    writers = [await stalled_stream(port, STALLED_MAX_TOKENS) for _ in range(STALLED_STREAMS)]
    try:
        return await probe(client, seconds)
    finally:
        for writer in writers:
            writer.close()


async def huge_prompt(port: int, client: httpx.AsyncClient, seconds: float) -> list[float]:
    body = json.dumps({"model": "instant-model", "messages": [{"role": "user", "content": HUGE_PROMPT}]})
    headers = {"content-type": "application/json"}

    async def senders() -> None:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as other:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                refused = await other.post("/v1/chat/completions", content=body, headers=headers)
                too_big = await other.post(
                    "/v1/chat/completions", content=body + " " * MAX_REQUEST_BYTES, headers=headers
                )
                if (refused.status_code, too_big.status_code) != (400, 413):
                    raise RuntimeError(f"expected 400 and 413, got {refused.status_code}, {too_big.status_code}")

    sending = asyncio.create_task(senders())
    try:
        return await probe(client, seconds)
    finally:
        await sending


SCENARIOS: dict[str, Callable[[int, httpx.AsyncClient, float], Awaitable[list[float]]]] = {
    "stalled-readers": stalled_readers,
    "huge-prompt": huge_prompt,
}


def run_scenario(name: str, seconds: float) -> dict[str, Any]:
    async def measure(port: int, base_url: str) -> tuple[list[float], list[float]]:
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
            await client.get("/health")
            idle = await probe(client, seconds)
            loaded = await SCENARIOS[name](port, client, seconds)
            return idle, loaded

    with tempfile.TemporaryDirectory() as tmp, running_server(Path(tmp)) as server:
        idle, loaded = asyncio.run(measure(server.port, server.base_url))
    row: dict[str, Any] = {"scenario": name, "probes": len(loaded)}
    for label, values in (("idle", idle), ("loaded", loaded)):
        for q in (0.5, 0.99):
            row[f"{label}_p{int(q * 100)}_ms"] = quantile(values, q) * 1000
        row[f"{label}_max_ms"] = max(values) * 1000
    row["p99_ratio"] = row["loaded_p99_ms"] / row["idle_p99_ms"]
    row["goal_p99_ms"] = P99_GOAL_S * 1000
    row["met"] = row["loaded_p99_ms"] < P99_GOAL_S * 1000
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=3.0, help="probe time per phase (idle, loaded)")
    p.add_argument("--only", help=f"comma-separated subset of {','.join(SCENARIOS)}")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "health_probe.json")
    args = p.parse_args()
    names = args.only.split(",") if args.only else list(SCENARIOS)
    rows = [run_scenario(name, args.seconds) for name in names]
    print(f"{'scenario':<16} {'idle p99':>9} {'p50':>7} {'p99':>7} {'max':>7} {'p99/idle':>9}  goal p99 < 50 ms")
    for r in rows:
        print(
            f"{r['scenario']:<16} {r['idle_p99_ms']:>7.1f}ms {r['loaded_p50_ms']:>5.1f}ms {r['loaded_p99_ms']:>5.1f}ms "
            f"{r['loaded_max_ms']:>5.1f}ms {r['p99_ratio']:>8.1f}x  {'met' if r['met'] else 'MISSED'}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"bench": "health_probe", "rows": rows}, indent=2) + "\n")
    return 0 if all(r["met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
