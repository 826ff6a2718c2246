"""Soak: one scheduler replica driven at 80 % of its capacity for ``--minutes``; do the books balance?

Starts ``llmsim serve`` with one scheduler-engine model (llama-3.1-8b on an L4: a capacity of a few
requests per second, which two shared cores can drive and read without the client being the limit),
finds its capacity with ``llmsim plan --rates`` (virtual time, same config, the mean request shape:
the highest rate whose TTFT p99 stays under 2 s), then sends Poisson arrivals at 80 % of it:
/v1/completions with mixed prompt (200-600 words) and output (40-200 tokens, ``ignore_eos``)
lengths, 40 % streamed (with ``include_usage``), and 5 % of the streams dropped by the client after
a few chunks. Every minute it records server RSS, the client's counts and the server's /metrics.

At the end (all requests settled, server idle) it checks what is exactly checkable:

- requests: ``request_success_total`` (every reason) = client completed + client aborted;
- aborts: ``request_success_total{finished_reason="abort"}`` = client aborted;
- prompt tokens: ``prompt_tokens_total`` = usage of completed + aborted ones' prompts (counted by
  ``/tokenize`` afterwards; an aborted one had its first token, so its prompt counts);
- generation tokens: only bounded, since the server counts what it released, some of which was in
  flight when the client left: ``generation_tokens_total`` - completed usage lies between the
  tokens the aborting clients read and the ``max_tokens`` they asked for.

Reports RSS growth from minute 2 to the end, errors by status. Writes bench/results/soak.json.

    .venv/bin/python bench/bench_soak.py [--minutes 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server import running_server  # noqa: E402

MODEL = "soak-8b-l4"
CONFIG = f"""version: 1
models:
  - name: {MODEL}
    engine: scheduler
    profile: llama-3.1-8b
    hardware: l4-24gb
    context_length: 8192
"""
PROMPT_WORDS = (200, 600)
MAX_TOKENS = (40, 200)
STREAM_SHARE, ABORT_SHARE, LOAD = 0.4, 0.05, 0.8
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
COUNTERS = ("vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total")


def capacity(tmp: Path) -> float:
    """Highest Poisson rate (0.25 req/s steps) meeting TTFT p99 <= 2 s in virtual time, 5 minutes."""
    (tmp / "plan.yml").write_text(CONFIG)
    rates = ",".join(str(r / 4) for r in range(4, 41))
    shape = ("--prompt-tokens", "400", "--output-tokens", "120")  # the mean of the mix, in tokens
    cmd = [sys.executable, "-m", "llmsim.cli", "plan", "--config", str(tmp / "plan.yml"), "--model", MODEL]
    cmd += ["--rates", rates, "--duration", "300", *shape, "--slo", "ttft_p99=2000", "--json", str(tmp / "p.json")]
    subprocess.run(cmd, check=True, capture_output=True)
    return float(json.loads((tmp / "p.json").read_text())["best_rate"])


def scrape(text: str) -> dict[str, float]:
    """The counters and gauges, summed over their labels, and the aborts apart."""
    out = dict.fromkeys((*GAUGES, *COUNTERS, "abort"), 0.0)
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        base = name.split("{", 1)[0]
        if base in out:
            out[base] += float(value)
        if base == "vllm:request_success_total" and 'finished_reason="abort"' in name:
            out["abort"] += float(value)
    return out


def rss_mib(pid: int) -> float:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


class Client:
    def __init__(self, http: httpx.AsyncClient, seed: int) -> None:
        self.http, self.rng = http, random.Random(seed)
        self.sent = self.completed = self.aborted = 0
        self.errors: Counter[str] = Counter()
        self.prompt_tokens = self.completion_tokens = self.abort_seen = self.abort_max = 0
        self.abort_words: list[int] = []

    async def one(self) -> None:
        words, max_tokens = self.rng.randint(*PROMPT_WORDS), self.rng.randint(*MAX_TOKENS)
        stream = self.rng.random() < STREAM_SHARE
        abort_after = self.rng.randint(3, 20) if stream and self.rng.random() < ABORT_SHARE else None
        body: dict[str, Any] = {"model": MODEL, "prompt": "lorem " * words, "max_tokens": max_tokens}
        body |= {"ignore_eos": True, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        self.sent += 1
        try:
            usage: dict[str, int] | None = None
            if not stream:
                r = await self.http.post("/v1/completions", json=body)
                if r.status_code != 200:
                    self.errors[str(r.status_code)] += 1
                    return
                usage = r.json()["usage"]
            else:
                async with self.http.stream("POST", "/v1/completions", json=body) as r:
                    if r.status_code != 200:
                        self.errors[str(r.status_code)] += 1
                        return
                    chunks = 0
                    async for line in r.aiter_lines():
                        if not line.startswith("data: {"):
                            continue
                        event = json.loads(line[6:])
                        if event["choices"]:
                            chunks += 1
                        usage = event.get("usage") or usage
                        if abort_after is not None and chunks >= abort_after:
                            self.aborted += 1
                            self.abort_seen, self.abort_max = self.abort_seen + chunks, self.abort_max + max_tokens
                            self.abort_words.append(words)
                            return  # leaving the block closes the connection mid-stream
            assert usage is not None
            self.completed += 1
            self.prompt_tokens += usage["prompt_tokens"]
            self.completion_tokens += usage["completion_tokens"]
        except (httpx.HTTPError, KeyError, ValueError, AssertionError) as e:
            self.errors[type(e).__name__] += 1


async def soak(base_url: str, pid: int, rate: float, minutes: float, seed: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    async with httpx.AsyncClient(base_url=base_url, timeout=300, limits=limits) as http:
        client, tasks, samples = Client(http, seed), set[asyncio.Task[None]](), []
        start, arrivals = time.monotonic(), random.Random(seed + 1)

        async def sample() -> None:
            metrics = scrape((await http.get("/metrics")).text)
            row = {"minute": round((time.monotonic() - start) / 60, 2), "rss_mib": round(rss_mib(pid), 2)}
            row |= {"sent": client.sent, "completed": client.completed, "aborted": client.aborted}
            samples.append(row | {"errors": dict(client.errors), "metrics": metrics})

        await sample()
        next_sample, end, arrival = start + 60, start + minutes * 60, start
        while True:
            arrival += arrivals.expovariate(rate)
            if arrival >= end:
                break
            while (now := time.monotonic()) < arrival:
                if now >= next_sample:
                    await sample()
                    next_sample += 60
                await asyncio.sleep(min(arrival, next_sample) - now)
            task = asyncio.create_task(client.one())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
        for _ in range(100):  # the server finishes its aborted sequences on its own schedule
            m = scrape((await http.get("/metrics")).text)
            if m["vllm:num_requests_running"] + m["vllm:num_requests_waiting"] == 0:
                break
            await asyncio.sleep(0.1)
        abort_prompt = 0
        for words in client.abort_words:
            r = await http.post("/tokenize", json={"model": MODEL, "prompt": "lorem " * words})
            abort_prompt += r.json()["count"]
        await sample()
        return {"client": client, "samples": samples, "abort_prompt": abort_prompt}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "soak.json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        cap = capacity(tmp)
        with running_server(tmp, config=CONFIG) as server:
            run = asyncio.run(soak(server.base_url, server.process.pid, LOAD * cap, args.minutes, args.seed))
    c: Client = run["client"]
    samples, last = run["samples"], run["samples"][-1]["metrics"]
    abort_prompt = run["abort_prompt"]
    generated_by_aborted = last["vllm:generation_tokens_total"] - c.completion_tokens
    checks = {
        "requests": last["vllm:request_success_total"] == c.completed + c.aborted,
        "aborts": last["abort"] == c.aborted,
        "prompt_tokens": last["vllm:prompt_tokens_total"] == c.prompt_tokens + abort_prompt,
        "generation_tokens_bounded": c.abort_seen <= generated_by_aborted <= c.abort_max,
        "no_errors": not c.errors,
    }
    base = samples[min(2, len(samples) - 2)]  # minute 2 (or the first sample of a short run)
    growth = samples[-1]["rss_mib"] - base["rss_mib"]
    result = {
        "bench": "soak",
        "minutes": args.minutes,
        "capacity_rps": cap,
        "rate_rps": LOAD * cap,
        "sent": c.sent,
        "completed": c.completed,
        "aborted": c.aborted,
        "errors": dict(c.errors),
        "client": {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens},
        "server": {k: last[k] for k in (*COUNTERS, "abort")},
        "aborted_prompt_tokens": abort_prompt,
        "aborted_tokens": {"read": c.abort_seen, "server_counted": generated_by_aborted, "asked": c.abort_max},
        "rss_from_minute": base["minute"],
        "rss_growth_mib": round(growth, 2),
        "rss_growth_pct": round(100 * growth / base["rss_mib"], 2),
        "checks": checks,
        "samples": samples,
    }
    print(f"capacity {cap:.2f} req/s, driven at {LOAD * cap:.2f} req/s for {args.minutes:g} min")
    print(f"sent {c.sent}, completed {c.completed}, aborted {c.aborted}, errors {sum(c.errors.values())}")
    rss = f"{base['rss_mib']:.1f} -> {samples[-1]['rss_mib']:.1f} MiB"
    print(f"RSS {rss} ({growth:+.1f} MiB, {result['rss_growth_pct']:+.2f} %)")
    for name, met in checks.items():
        print(f"  {name:<26} {'met' if met else 'MISSED'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
