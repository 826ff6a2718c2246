"""/health while the largest request the server accepts is answered: p99 goal < 50 ms.

One request may ask for prompts × n × max_tokens output tokens, up to ``llmsim serve
--max-request-output-tokens`` (default 262,144). This bench starts ``llmsim serve`` (embedded
config: instant-model, every token due at once, context 32,768), sends the worst accepted shapes
one at a time from a client process of its own, and meanwhile probes ``GET /health`` on a
keep-alive connection, one probe after the other, from this process. Per shape it records the
probes' p50/p99/max, the request's duration and status, and the server's RSS growth; and the
same probes with no load, for reference.

Shapes (all at the default limit): n=128 × max_tokens=2,048 and n=8 × max_tokens=32,760, each
non-streamed and streamed (the client reads as fast as it can), and 128 prompts × n=128 ×
max_tokens=16 (16,384 choices); then n=128 × 30,000 (the request that once froze a replica), which must be refused
at once.

    .venv/bin/python bench/bench_health_under_load.py [--transport fast|plain] [--seconds-before 1]

Writes bench/results/health_under_load.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server import TRANSPORTS, running_server  # noqa: E402

GOAL_P99_S = 0.050

SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("n128x2048", {"n": 128, "max_tokens": 2048}),
    ("n128x2048 stream", {"n": 128, "max_tokens": 2048, "stream": True}),
    ("n8x32760", {"n": 8, "max_tokens": 32760}),
    ("n8x32760 stream", {"n": 8, "max_tokens": 32760, "stream": True}),
    ("p128xn128x16", {"prompt": ["hi"] * 128, "n": 128, "max_tokens": 16}),
    ("issue n128x30000", {"n": 128, "max_tokens": 30000}),
]

# The client: one request, its body read to the end and counted; prints status, bytes, seconds.
CLIENT = """
import json, sys, time, httpx
url, body = sys.argv[1], json.loads(sys.argv[2])
start = time.perf_counter()
size = 0
with httpx.Client(timeout=600) as c, c.stream("POST", url, json=body) as r:
    for chunk in r.iter_raw():
        size += len(chunk)
print(json.dumps({"status": r.status_code, "bytes": size, "seconds": time.perf_counter() - start}))
"""


@dataclass(slots=True)
class Result:
    """One shape's figures (an unloaded reference has shape "idle"); never raises."""

    shape: str
    status: int
    response_mb: float
    request_s: float
    probes: int
    health_p50_ms: float
    health_p99_ms: float
    health_max_ms: float
    rss_growth_mib: float
    error: str | None = None


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))] if ordered else float("nan")


def probe_once(probe: httpx.Client) -> float:
    """One /health answer's latency (seconds), as a health checker on a kept-alive connection sees it."""
    start = time.perf_counter()
    probe.get("/health")
    return time.perf_counter() - start


def run_shape(base_url: str, pid: int, shape: str, extra: dict[str, Any], probe: httpx.Client) -> Result:
    body = {"model": "instant-model", "prompt": "hi", "ignore_eos": True, **extra}
    before = rss_mib(pid)
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, base_url + "/v1/completions", json.dumps(body)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = before
    latencies: list[float] = []
    while client.poll() is None:
        latencies.append(probe_once(probe))
        peak = max(peak, rss_mib(pid))
    out, err = client.communicate()
    try:
        answer = json.loads(out)
    except ValueError:
        return Result(shape, 0, 0.0, 0.0, len(latencies), *_ms(latencies), peak - before, error=err[-500:])
    return Result(
        shape,
        answer["status"],
        answer["bytes"] / 1e6,
        answer["seconds"],
        len(latencies),
        *_ms(latencies),
        rss_growth_mib=peak - before,
    )


def _ms(latencies: list[float]) -> tuple[float, float, float]:
    if not latencies:
        return float("nan"), float("nan"), float("nan")
    return (
        statistics.median(latencies) * 1000,
        percentile(latencies, 0.99) * 1000,
        max(latencies) * 1000,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transport", choices=sorted(TRANSPORTS), default="fast")
    parser.add_argument("--seconds-before", type=float, default=1.0, help="unloaded probes first, for reference")
    parser.add_argument("--out", default=str(ROOT / "bench/results/health_under_load.json"))
    args = parser.parse_args()
    results: list[Result] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_server(Path(tmp), env=TRANSPORTS[args.transport]) as server,
        httpx.Client(base_url=server.base_url, timeout=30) as probe,
    ):
        pid = server.process.pid
        end = time.perf_counter() + args.seconds_before
        idle = []
        while time.perf_counter() < end:
            idle.append(probe_once(probe))
        results.append(Result("idle", 200, 0.0, 0.0, len(idle), *_ms(idle), rss_growth_mib=0.0))
        for shape, extra in SHAPES:
            results.append(run_shape(server.base_url, pid, shape, extra, probe))
    print(
        f"{'shape':<20} {'status':>6} {'MB':>7} {'req s':>7} {'probes':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'RSS+ MiB':>8}"
    )
    for r in results:
        print(
            f"{r.shape:<20} {r.status:>6} {r.response_mb:>7.1f} {r.request_s:>7.2f} {r.probes:>6} "
            f"{r.health_p50_ms:>7.1f} {r.health_p99_ms:>7.1f} {r.health_max_ms:>7.1f} {r.rss_growth_mib:>8.1f}"
            + (f"  error: {r.error}" if r.error else "")
        )
    loaded = [r for r in results if r.shape != "idle" and r.status == 200]
    worst = max((r.health_p99_ms for r in loaded), default=float("nan"))
    verdict = "met" if worst < GOAL_P99_S * 1000 else "missed"
    print(
        f"/health p99 under the worst accepted request: {worst:.1f} ms (goal < {GOAL_P99_S * 1000:.0f} ms: {verdict})"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "machine": platform.node(),
                "transport": args.transport,
                "goal_p99_ms": GOAL_P99_S * 1000,
                "worst_p99_ms": worst,
                "results": [asdict(r) for r in results],
            },
            indent=2,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
