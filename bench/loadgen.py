"""A closed-loop streaming load generator, run as its own process so it never shares a CPU-bound
event loop with the server it measures.

Each of ``--concurrency`` workers sends streaming chat completions back to back for
``--duration`` seconds and records, per token, the client receive time. It reports output tokens/s
and, for the fixed engine whose timeline is known (``--ttft``/``--itl``), the client-side
lateness of every token against ``send + ttft + i * itl`` (an upper bound of the server's lag:
it adds delivery). It also reports its own event-loop lateness, so a saturated client is visible.
Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import aiohttp


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


async def monitor_loop(stop: asyncio.Event, lateness: list[float], period: float = 0.01) -> None:
    """Our own health: how late does a 10 ms timer fire on the client loop."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t0 = loop.time()
        await asyncio.sleep(period)
        lateness.append(loop.time() - t0 - period)


async def worker(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    until: float,
    ttft: float | None,
    itl: float | None,
    out: dict[str, Any],
) -> None:
    while time.monotonic() < until:
        sent = time.monotonic()
        index = 0
        async with session.post(url, data=body, headers={"content-type": "application/json"}) as resp:
            if resp.status != 200:
                out["errors"] += 1
                await resp.read()
                continue
            # Whole reads, split into events here: iterating line by line cost the client about as much
            # CPU per token as the server spends, which made the client the bottleneck at a few hundred
            # streams. Every event of one read gets the read's time (they did arrive together).
            rest = b""
            async for data in resp.content.iter_any():
                now = time.monotonic()
                events = (rest + data).split(b"\n\n")
                rest = events.pop()
                for event in events:
                    if not event.startswith(b"data: {"):
                        continue
                    if b'"content":""' in event or b'"choices":[]' in event:
                        continue  # role / usage chunks carry no token
                    if index == 0:
                        out["ttft"].append(now - sent)
                    if ttft is not None and itl is not None:
                        out["lateness"].append(now - (sent + ttft + index * itl))
                    index += 1
                    out["tokens"] += 1
        out["requests"] += 1


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    body = json.dumps(
        {
            "model": args.model,
            "messages": [{"role": "user", "content": args.prompt}],
            "max_tokens": args.max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    out: dict[str, Any] = {"tokens": 0, "requests": 0, "errors": 0, "ttft": [], "lateness": []}
    stop = asyncio.Event()
    loop_lateness: list[float] = []
    monitor = asyncio.create_task(monitor_loop(stop, loop_lateness))
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic()
        until = start + args.duration
        url = args.url.rstrip("/") + "/v1/chat/completions"
        await asyncio.gather(
            *(worker(session, url, body, until, args.ttft, args.itl, out) for _ in range(args.concurrency))
        )
        elapsed = time.monotonic() - start
    stop.set()
    await monitor
    lat = out["lateness"]
    return {
        "concurrency": args.concurrency,
        "elapsed_s": elapsed,
        "requests": out["requests"],
        "errors": out["errors"],
        "output_tokens": out["tokens"],
        "output_tokens_per_s": out["tokens"] / elapsed,
        "ttft_p50_ms": pct(out["ttft"], 50) * 1000,
        "ttft_p99_ms": pct(out["ttft"], 99) * 1000,
        "client_lateness_p50_ms": pct(lat, 50) * 1000 if lat else None,
        "client_lateness_p99_ms": pct(lat, 99) * 1000 if lat else None,
        "client_loop_lateness_p99_ms": pct(loop_lateness, 99) * 1000,
        "client_loop_lateness_median_ms": statistics.median(loop_lateness) * 1000 if loop_lateness else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt", default="Tell me a story about a lighthouse keeper.")
    p.add_argument("--ttft", type=float, default=None, help="the fixed engine's TTFT for this prompt (s)")
    p.add_argument("--itl", type=float, default=None, help="the fixed engine's ITL (s)")
    args = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
