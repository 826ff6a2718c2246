"""CPU per token on a decode replica, with and without the P/D hand-off, at the same load in one run.

Three ``llmsim serve`` processes on one model (the embedded llama-3.1-8b on an H100): a prefill
replica (kv_producer), a decode replica (kv_consumer) and a plain replica (no kv_transfer). Each
round runs the same closed loop of ``--concurrency`` clients for ``--duration`` seconds, twice:

- plain: each client sends a one-token request to the prefill replica (no hand-off), then streams
  a request of ``--max-tokens`` tokens from the plain replica;
- P/D: each client sends the prefill leg (max_tokens 1, not streamed) to the prefill replica, then
  streams the decode leg with the answer's ``kv_transfer_params`` from the decode replica (what
  vllm-router does), which checks and releases the blocks over the side channel.

The figure: CPU (utime + stime from /proc) of the serving replica (plain, or decode) per streamed
token; the prefill replica's CPU is reported apart (P/D only). Medians over ``--rounds``. Both
variants send the same requests in the same closed loop, so the serving replica carries the same
load; what differs is the hand-off (parsing the params, the side channel's check and release, the
pull's wait and the recomputed token).

    .venv/bin/python bench/bench_pd_token_path.py [--quick] [--concurrency 16] [--duration 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server import ServerProcess, free_port, running_server  # noqa: E402

from bench.bench_token_path import process_cpu_seconds  # noqa: E402

MODEL = "m"
CONFIG = """
version: 1
models:
  - name: m
    engine: scheduler
    profile: llama-3.1-8b
    hardware: h100-80gb
{kv}
"""
KV = "    kv_transfer: {{kv_role: {role}, side_channel_port: {port}}}"
PROMPT = "Tell me about the river and the sea. " * 20


async def _client(
    http: httpx.AsyncClient, pd: bool, urls: dict[str, str], max_tokens: int, until: float, n: int
) -> tuple[int, int]:
    tokens = errors = 0
    i = 0
    while time.monotonic() < until:
        prompt = f"{n}-{i} {PROMPT}"  # distinct prompts: no prefix hits on either side
        i += 1
        body: dict[str, Any] = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": True}
        url = urls["plain"]
        try:
            # Both variants make the same round trip to the prefill replica first, so the serving
            # replica sees the same arrival pattern; only P/D's carries the hand-off.
            leg: dict[str, Any] = {"model": MODEL, "prompt": prompt, "max_tokens": 1}
            if pd:
                leg["kv_transfer_params"] = {"do_remote_decode": True}
            answer = (await http.post(urls["prefill"] + "/v1/completions", json=leg)).json()
            if pd:
                body["kv_transfer_params"] = answer["kv_transfer_params"]
                url = urls["decode"]
            async with http.stream("POST", url + "/v1/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        tokens += 1
        except (httpx.HTTPError, KeyError, ValueError):
            errors += 1
    return tokens, errors


async def _load(pd: bool, urls: dict[str, str], concurrency: int, duration: float, max_tokens: int) -> tuple[int, int]:
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency * 2)
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        until = time.monotonic() + duration
        done = await asyncio.gather(*(_client(http, pd, urls, max_tokens, until, n) for n in range(concurrency)))
    return sum(t for t, _ in done), sum(e for _, e in done)


def measure(servers: dict[str, ServerProcess], pd: bool, args: argparse.Namespace) -> dict[str, float]:
    urls = {name: s.base_url for name, s in servers.items()}
    serving = servers["decode" if pd else "plain"]
    cpu0 = process_cpu_seconds(serving.process.pid)
    prefill0 = process_cpu_seconds(servers["prefill"].process.pid)
    tokens, errors = asyncio.run(_load(pd, urls, args.concurrency, args.duration, args.max_tokens))
    cpu = process_cpu_seconds(serving.process.pid) - cpu0
    prefill_cpu = process_cpu_seconds(servers["prefill"].process.pid) - prefill0
    return {
        "tokens": tokens,
        "errors": errors,
        "cpu_us_per_token": cpu / tokens * 1e6 if tokens else float("nan"),
        "prefill_cpu_us_per_token": prefill_cpu / tokens * 1e6 if tokens and pd else 0.0,
        "tokens_per_s": tokens / args.duration,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="one short round at low concurrency")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.concurrency, args.duration, args.rounds = 4, 1.0, 1
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "pd": []}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        servers: dict[str, ServerProcess] = {}
        for name, kv in (
            ("prefill", KV.format(role="kv_producer", port=free_port())),
            ("decode", KV.format(role="kv_consumer", port=free_port())),
            ("plain", ""),
        ):
            where = Path(tmp) / name
            where.mkdir()
            servers[name] = stack.enter_context(running_server(where, config=CONFIG.format(kv=kv)))
        for rnd in range(args.rounds):
            for variant in ("plain", "pd"):
                run = measure(servers, variant == "pd", args)
                runs[variant].append(run)
                print(
                    f"round {rnd} {variant:5s} cpu/token={run['cpu_us_per_token']:7.1f} us  "
                    f"tokens/s={run['tokens_per_s']:7.0f}  errors={run['errors']:.0f}",
                    flush=True,
                )
    summary = {variant: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for variant, rs in runs.items()}
    plain, pd = summary["plain"], summary["pd"]
    print("| variant | decode CPU µs/token | prefill CPU µs/token | tokens/s | errors |")
    print("|---|---:|---:|---:|---:|")
    for name, m in (("plain", plain), ("P/D", pd)):
        print(
            f"| {name} | {m['cpu_us_per_token']:.1f} | {m['prefill_cpu_us_per_token']:.1f} | "
            f"{m['tokens_per_s']:.0f} | {m['errors']:.0f} |"
        )
    print(f"P/D / plain (decode replica CPU per token): {pd['cpu_us_per_token'] / plain['cpu_us_per_token']:.2f}")
    result = {"args": {k: str(v) for k, v in vars(args).items()}, "summary": summary, "runs": runs}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
