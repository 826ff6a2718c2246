"""Data-parallel density: one process with 8 ranks against 8 single-rank processes, same run.

Eight ranks in one process (``data_parallel: {size: 8}``, internal load balancing) share one
interpreter, one generator and tokenizer, one event loop and one HTTP server; eight processes
repeat all of it. Both serve llama-3.1-8b on a simulated H100 (the embedded default's model).
Measured, for each layout:

- idle RSS after startup and one warm-up request per rank (``/proc/<pid>/status`` VmRSS);
- CPU per output token under the same total load: closed-loop streaming chat clients, the same
  number per rank in both layouts (in this process, so their CPU is not counted), the servers'
  user + system CPU time (``/proc/<pid>/stat``) over the run divided by the output tokens their
  ``vllm:generation_tokens_total`` counted;
- the servers' token-release lag p99 (``/metrics/summary``'s ``lag``, the simulator's own error).

Goals: the 8-rank process idles at no more than 1.5x the RSS of one single-rank process, and
spends no more CPU per token than the 8 processes. Prints a table and writes
bench/results/dp_density.json.

    .venv/bin/python bench/bench_dp_density.py [--quick] [--duration 8] [--streams-per-rank 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.metrics.scrape import parse  # noqa: E402
from tests.support.server import ServerProcess, running_server  # noqa: E402

RANKS = 8
RSS_GOAL = 1.5
MODEL = "llama-3.1-8b"
CONFIG = """
version: 1
models:
  - name: llama-3.1-8b
    engine: scheduler
    profile: llama-3.1-8b
    hardware: h100-80gb
    context_length: 8192
    kv_cache: {{block_size: 16, gpu_memory_utilization: 0.9}}
    data_parallel: {{size: {size}}}
"""
RESPONSES = "version: 1\nresponses: []\ndefault:\n  content: Fine, thank you.\n"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_s(pid: int) -> float:
    # Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def generated(server: ServerProcess) -> float:
    page = parse(httpx.get(server.base_url + "/metrics", timeout=10).text)
    return sum(v for (name, _), v in page.values.items() if name == "vllm:generation_tokens_total")


def lag_p99_ms(server: ServerProcess) -> float | None:
    summary = httpx.get(server.base_url + "/metrics/summary", timeout=10).json()["models"][MODEL]
    p99 = summary["lag"]["p99"]
    return p99 * 1000 if p99 is not None else None


async def stream(client: httpx.AsyncClient, url: str, max_tokens: int) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        async for _ in r.aiter_raw():
            pass


async def warm_up(urls: list[str]) -> None:
    """One short request per rank, all at once (the 8-rank server spreads them over its ranks)."""
    async with httpx.AsyncClient(timeout=60) as client:
        await asyncio.gather(*(stream(client, urls[i % len(urls)], 4) for i in range(RANKS)))


async def load(urls: list[str], streams: int, seconds: float, max_tokens: int) -> None:
    """``streams`` closed loops, stream i on ``urls[i % len(urls)]``, for ``seconds``."""
    end = time.monotonic() + seconds

    async def loop(url: str) -> None:
        async with httpx.AsyncClient(timeout=60) as client:
            while time.monotonic() < end:
                await stream(client, url, max_tokens)

    await asyncio.gather(*(loop(urls[i % len(urls)]) for i in range(streams)))


def measure(servers: list[ServerProcess], streams: int, seconds: float, max_tokens: int) -> dict[str, Any]:
    urls = [s.base_url for s in servers]
    # One request per rank first, so idle RSS includes what serving allocates once.
    asyncio.run(warm_up(urls))
    idle = sum(rss_mib(s.process.pid) for s in servers)
    for s in servers:
        httpx.delete(s.base_url + "/metrics/summary", timeout=10).raise_for_status()
    tokens0 = sum(generated(s) for s in servers)
    cpu0 = sum(cpu_s(s.process.pid) for s in servers)
    asyncio.run(load(urls, streams, seconds, max_tokens))
    cpu = sum(cpu_s(s.process.pid) for s in servers) - cpu0
    tokens = sum(generated(s) for s in servers) - tokens0
    lags = [lag for s in servers if (lag := lag_p99_ms(s)) is not None]
    return {
        "processes": len(servers),
        "idle_rss_mib": round(idle, 1),
        "output_tokens": int(tokens),
        "server_cpu_s": round(cpu, 2),
        "cpu_us_per_token": round(cpu / tokens * 1e6, 1) if tokens else None,
        "lag_p99_ms": round(max(lags), 2) if lags else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one second of load, one stream per rank")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of load per layout")
    parser.add_argument("--streams-per-rank", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "dp_density.json")
    args = parser.parse_args()
    if args.quick:
        args.duration, args.streams_per_rank, args.max_tokens = 1.0, 1, 64
    streams = RANKS * args.streams_per_rank
    results: dict[str, Any] = {"ranks": RANKS, "streams": streams, "duration_s": args.duration}
    with tempfile.TemporaryDirectory() as tmp:
        with running_server(Path(tmp), config=CONFIG.format(size=RANKS), responses=RESPONSES) as one:
            results["one_process"] = measure([one], streams, args.duration, args.max_tokens)
        with ExitStack() as stack:
            many = []
            for i in range(RANKS):
                folder = Path(tmp) / f"rank{i}"
                folder.mkdir()
                server = running_server(folder, config=CONFIG.format(size=1), responses=RESPONSES)
                many.append(stack.enter_context(server))
            results["single_rank_idle_rss_mib"] = round(rss_mib(many[0].process.pid), 1)
            results["eight_processes"] = measure(many, streams, args.duration, args.max_tokens)
    one_p, eight_p = results["one_process"], results["eight_processes"]
    rss_ratio = one_p["idle_rss_mib"] / results["single_rank_idle_rss_mib"]
    results["rss_ratio_vs_one_single_rank_process"] = round(rss_ratio, 2)
    results["rss_goal_met"] = rss_ratio <= RSS_GOAL
    cpu_one, cpu_eight = one_p["cpu_us_per_token"], eight_p["cpu_us_per_token"]
    results["cpu_goal_met"] = cpu_one is not None and cpu_eight is not None and cpu_one <= cpu_eight
    print(f"{'layout':<24}{'idle RSS MiB':>14}{'tokens':>10}{'CPU us/token':>14}{'lag p99 ms':>12}")
    for name, r in (("8 ranks, 1 process", one_p), ("8 processes, 1 rank", eight_p)):
        print(
            f"{name:<24}{r['idle_rss_mib']:>14}{r['output_tokens']:>10}{r['cpu_us_per_token']!s:>14}"
            f"{r['lag_p99_ms']!s:>12}"
        )
    print(f"one single-rank process idle: {results['single_rank_idle_rss_mib']} MiB")
    print(f"RSS ratio {rss_ratio:.2f} (goal <= {RSS_GOAL}); CPU per token goal met: {results['cpu_goal_met']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
