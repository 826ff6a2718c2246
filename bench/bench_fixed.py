"""Throughput and token lag of the fixed engine at 50, 100, 200 and 400 concurrent streams.

The server runs as `llmsim serve` (uvicorn, uvloop, httptools) in its own process; the load
generator (bench/loadgen.py) in another. Each level runs --duration seconds after a short warm-up;
the server's own lag figures come from /metrics/summary (reset after warm-up) when available.

    .venv/bin/python bench/bench_fixed.py [--duration 10] [--levels 50,100,200,400]

Prints a table and writes bench/results/fixed.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server import running_server  # noqa: E402

TTFT_MS = 20.0
ITL_MS = 15.0
CONFIG = f"""
version: 1
models:
  - name: fixed
    engine: fixed
    context_length: 32768
    latency: {{ttft_overhead_ms: {TTFT_MS}, itl_ms: {ITL_MS}}}
"""


def server_lag(base_url: str) -> dict[str, Any] | None:
    try:
        r = httpx.get(base_url + "/metrics/summary", timeout=5)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    data: dict[str, Any] = r.json()
    model = data.get("models", data).get("fixed") if isinstance(data, dict) else None
    return model.get("lag") if isinstance(model, dict) else None


def run_level(base_url: str, concurrency: int, duration: float, max_tokens: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "loadgen.py"),
        "--url",
        base_url,
        "--model",
        "fixed",
        "--concurrency",
        str(concurrency),
        "--max-tokens",
        str(max_tokens),
        "--ttft",
        str(TTFT_MS / 1000),
        "--itl",
        str(ITL_MS / 1000),
    ]
    subprocess.run([*cmd, "--duration", "2"], check=True, capture_output=True)  # warm-up
    httpx.delete(base_url + "/metrics/summary", timeout=5)
    out = subprocess.run([*cmd, "--duration", str(duration)], check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout)
    result["server_lag"] = server_lag(base_url)
    return result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--levels", default="50,100,200,400")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fixed.json")
    args = p.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as tmp, running_server(Path(tmp), config=CONFIG) as server:
        for n in levels:
            r = run_level(server.base_url, n, args.duration, args.max_tokens)
            results.append(r)
            lag = r["server_lag"] or {}
            print(
                f"streams={n:4d}  tok/s={r['output_tokens_per_s']:8.0f}  "
                f"ideal={n * 1000 / ITL_MS:8.0f}  "
                f"server lag p50={lag.get('p50', float('nan')) * 1000:6.2f} ms p99={lag.get('p99', float('nan')) * 1000:6.2f} ms  "
                f"client lateness p50={r['client_lateness_p50_ms']:6.2f} ms p99={r['client_lateness_p99_ms']:7.2f} ms  "
                f"client loop p99={r['client_loop_lateness_p99_ms']:5.2f} ms  errors={r['errors']}",
                flush=True,
            )
    out = {
        "benchmark": "fixed",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "ttft_ms": TTFT_MS,
        "itl_ms": ITL_MS,
        "max_tokens": args.max_tokens,
        "duration_s": args.duration,
        "levels": results,
    }
    path = args.out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
