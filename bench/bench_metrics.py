"""Cost of llmsim's metrics: per-token observation, per-request accounting, and /metrics rendering.

In-process micro-benchmarks (median of ``timeit`` repeats):

- per token: our lock-free :class:`~llmsim.metrics.histogram.Histogram` (one ``observe`` call,
  and ``observe_many`` over a request's tokens) against prometheus_client's locked ``Histogram``
  child, and the summary's quantile sketch;
- per request: everything a 64-token request costs (first token, finish with its ITLs, lags);
- /metrics: the page written directly (:mod:`llmsim.metrics.exposition`) against
  ``prometheus_client.generate_latest`` over the same custom collector, for 1, 3 and 10 models
  with every histogram populated.

With ``--live`` it also starts ``llmsim serve`` (fixed engine), streams from bench/loadgen.py,
and scrapes /metrics every 50 ms as an endpoint picker does, reporting scrape latency and the
server's own token lag with and without the scraper.

    .venv/bin/python bench/bench_metrics.py [--live] [--duration 6] [--concurrency 100]

Prints the figures and writes bench/results/metrics.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import prometheus_client
from prometheus_client import generate_latest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server import running_server  # noqa: E402

from llmsim.metrics import MetricsHub, QuantileSketch, cache_config_labels  # noqa: E402
from llmsim.metrics.buckets import LAG_BUCKETS  # noqa: E402
from llmsim.metrics.histogram import Histogram  # noqa: E402
from llmsim.types import EngineSnapshot, FinishReason, RequestId, RequestStats, StepStats  # noqa: E402

TOKENS = 64


def best(fn: Callable[[], object], number: int, repeat: int = 7) -> float:
    """Median seconds per call."""
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number


def lags(n: int) -> list[float]:
    return [0.0001 + 0.00003 * (i % 17) for i in range(n)]


def per_token() -> dict[str, float]:
    values = lags(TOKENS)
    ours = Histogram(LAG_BUCKETS)
    registry = prometheus_client.CollectorRegistry()
    theirs = prometheus_client.Histogram(
        "x_seconds", "x", ["model_name", "engine"], buckets=LAG_BUCKETS, registry=registry
    ).labels("m", "0")
    sketch = QuantileSketch()

    def ours_one_by_one() -> None:
        observe = ours.observe
        for v in values:
            observe(v)

    def theirs_one_by_one() -> None:
        observe = theirs.observe
        for v in values:
            observe(v)

    def sketch_adds() -> None:
        add = sketch.add
        for v in values:
            add(v)

    def sketch_add_many() -> None:
        sketch.add_many(values)

    return {
        "own_histogram_observe_ns": best(ours_one_by_one, 2000) / TOKENS * 1e9,
        "own_histogram_observe_many_ns": best(lambda: ours.observe_many(values), 2000) / TOKENS * 1e9,
        "prometheus_client_histogram_observe_ns": best(theirs_one_by_one, 2000) / TOKENS * 1e9,
        "quantile_sketch_add_ns": best(sketch_adds, 2000) / TOKENS * 1e9,
        "quantile_sketch_add_many_ns": best(sketch_add_many, 2000) / TOKENS * 1e9,
    }


def request_stats(i: int, n: int = TOKENS) -> RequestStats:
    arrival = i * 0.1
    first = arrival + 0.05
    times = [first + 0.015 * k for k in range(n)]
    return RequestStats(
        RequestId(str(i)), 512, n, FinishReason.LENGTH, arrival, arrival + 0.01, first, times[-1], 0, times
    )


def per_request() -> dict[str, float]:
    hub = MetricsHub()
    m = hub.add_model("m", max_model_len=32768)
    stats = request_stats(1)
    values = lags(TOKENS)

    def one_request() -> None:
        m.on_first_token(0.05)
        m.on_request_finished(stats)
        m.observe_lags(values)

    step = StepStats(0, 0.0, 0.015, 32, 512, 31, 32, 0, 100, 1000, 0, 0.0001)
    per_req = best(one_request, 500)
    return {
        "request_us": per_req * 1e6,
        "request_per_token_us": per_req / TOKENS * 1e6,
        "on_step_us": best(lambda: m.on_step(step), 5000) * 1e6,
    }


def populated_hub(models: int) -> MetricsHub:
    hub = MetricsHub()
    kv = cache_config_labels(
        block_size=16, num_gpu_blocks=7609, gpu_memory_utilization=0.9, enable_prefix_caching=False
    )
    snap = EngineSnapshot(num_running=31, num_waiting=4, kv_used_blocks=2000, kv_total_blocks=7609)
    for j in range(models):
        m = hub.add_model(f"model-{j}", max_model_len=32768, snapshot=lambda: snap, cache_config=kv)
        for i in range(300):
            m.on_first_token(0.01 * (i % 50))
            m.on_request_finished(request_stats(i, 1 + i % 200))
            m.observe_lags(lags(20))
            m.on_step(StepStats(i, 0.0, 0.015, i % 64, i, i % 64, i % 64, 0, 100, 1000, 0, 0.0001))
    return hub


def render() -> list[dict[str, Any]]:
    out = []
    for models in (1, 3, 10):
        hub = populated_hub(models)
        fast = hub.render()
        assert fast == generate_latest(hub.registry), "the fast page must equal prometheus_client's"
        out.append(
            {
                "models": models,
                "page_bytes": len(fast),
                "page_lines": fast.count(b"\n"),
                "fast_ms": best(hub.render, 20) * 1e3,
                "prometheus_client_ms": best(partial(generate_latest, hub.registry), 5) * 1e3,
            }
        )
    return out


LIVE_CONFIG = """
version: 1
models:
  - name: fixed
    engine: fixed
    context_length: 32768
    latency: {ttft_overhead_ms: 20, itl_ms: 15}
"""


def scraper(base_url: str, stop: threading.Event, period: float, times: list[float]) -> None:
    """An endpoint picker: GET /metrics every ``period`` seconds on an absolute schedule."""
    with httpx.Client(timeout=5) as c:
        next_at = time.monotonic()
        while not stop.is_set():
            t0 = time.monotonic()
            c.get(base_url + "/metrics").raise_for_status()
            times.append(time.monotonic() - t0)
            next_at += period
            stop.wait(max(0.0, next_at - time.monotonic()))


def live_phase(base_url: str, concurrency: int, duration: float, scrape: bool) -> dict[str, Any]:
    cmd = [sys.executable, str(ROOT / "bench" / "loadgen.py"), "--url", base_url, "--model", "fixed"]
    cmd += ["--concurrency", str(concurrency), "--max-tokens", "64", "--ttft", "0.02", "--itl", "0.015"]
    subprocess.run([*cmd, "--duration", "2"], check=True, capture_output=True)  # warm-up
    httpx.delete(base_url + "/metrics/summary", timeout=5).raise_for_status()
    stop = threading.Event()
    times: list[float] = []
    thread = threading.Thread(target=scraper, args=(base_url, stop, 0.05, times), daemon=True)
    if scrape:
        thread.start()
    load = json.loads(
        subprocess.run([*cmd, "--duration", str(duration)], check=True, capture_output=True, text=True).stdout
    )
    stop.set()
    if scrape:
        thread.join()
    lag = httpx.get(base_url + "/metrics/summary", timeout=5).json()["models"]["fixed"]["lag"]
    result: dict[str, Any] = {
        "scraping_every_50ms": scrape,
        "output_tokens_per_s": load["output_tokens_per_s"],
        "server_lag_p50_ms": lag["p50"] * 1e3,
        "server_lag_p99_ms": lag["p99"] * 1e3,
        "server_lag_max_ms": lag["max"] * 1e3,
    }
    if times:
        times.sort()
        result |= {
            "scrapes": len(times),
            "scrape_p50_ms": times[len(times) // 2] * 1e3,
            "scrape_p99_ms": times[min(len(times) - 1, round(0.99 * (len(times) - 1)))] * 1e3,
        }
    return result


def live(concurrency: int, duration: float) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp, running_server(Path(tmp), config=LIVE_CONFIG) as server:
        return [live_phase(server.base_url, concurrency, duration, scrape) for scrape in (False, True)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--live", action="store_true", help="also measure a live server under load")
    p.add_argument("--duration", type=float, default=6.0)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "metrics.json")
    args = p.parse_args()

    tokens = per_token()
    print("per token (ns):", "  ".join(f"{k}={v:.0f}" for k, v in tokens.items()), flush=True)
    request = per_request()
    print(
        f"per {TOKENS}-token request: {request['request_us']:.1f} µs ({request['request_per_token_us']:.2f} µs/token); "
        f"per step: {request['on_step_us']:.2f} µs",
        flush=True,
    )
    pages = render()
    for r in pages:
        print(
            f"/metrics with {r['models']:2d} model(s): {r['page_lines']:5d} lines {r['page_bytes'] / 1024:6.1f} KiB  "
            f"fast {r['fast_ms']:6.2f} ms  prometheus_client {r['prometheus_client_ms']:6.2f} ms  "
            f"({r['prometheus_client_ms'] / r['fast_ms']:.0f}x)",
            flush=True,
        )
    out: dict[str, Any] = {
        "benchmark": "metrics",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "tokens_per_request": TOKENS,
        "per_token_ns": tokens,
        "per_request": request,
        "render": pages,
    }
    if args.live:
        phases = live(args.concurrency, args.duration)
        for r in phases:
            scrape = (
                f"  scrape p50 {r['scrape_p50_ms']:.2f} ms p99 {r['scrape_p99_ms']:.2f} ms" if "scrapes" in r else ""
            )
            print(
                f"live {args.concurrency} streams, scraping={r['scraping_every_50ms']!s:5}: "
                f"{r['output_tokens_per_s']:7.0f} tok/s  server lag p50 {r['server_lag_p50_ms']:.2f} ms "
                f"p99 {r['server_lag_p99_ms']:.2f} ms max {r['server_lag_max_ms']:.2f} ms{scrape}",
                flush=True,
            )
        out["live"] = {"concurrency": args.concurrency, "duration_s": args.duration, "phases": phases}
    path = args.out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
