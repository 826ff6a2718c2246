"""A/B of the per-token path: server CPU per streamed token, old tree against new tree, in one run.

The machine is shared and noisy, so two runs at different times do not compare. This bench
starts one ``llmsim serve`` per source root (each with ``PYTHONPATH=<root>/simulator``; same
venv, same fixed-engine config) and drives them alternately with the same closed-loop load
(bench/loadgen.py, its own process): per round and level, A then B, the order swapped every
round (ABBA) so a drift in background load hits both alike. Per run it records

- server CPU: utime + stime of the server process from /proc/<pid>/stat, read before the load
  generator starts and after it exits (an idle server costs ~nothing, so the window is exact),
  divided by the tokens the client received;
- output tokens/s as the client saw them;
- the server's token lag p50/p99 from /metrics/summary (reset before each run).

It reports the median of each figure per (level, variant) and the ratio B / A.

    git archive HEAD | tar -x -C /tmp/baseline     # the committed tree, read-only
    .venv/bin/python bench/bench_token_path.py --a /tmp/baseline --b . [--levels 50,200] [--rounds 5]

Writes bench/results/token_path.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server import ServerProcess, running_server  # noqa: E402

from bench.bench_fixed import CONFIG, ITL_MS, TTFT_MS  # noqa: E402

_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(slots=True)
class Run:
    """One load run against one server; never raises, errors are counted."""

    variant: str
    level: int
    round: int
    cpu_s: float
    tokens: int
    cpu_us_per_token: float
    tokens_per_s: float
    lag_p50_ms: float
    lag_p99_ms: float
    client_loop_p99_ms: float
    errors: int


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (clock-tick resolution, 10 ms on Linux)."""
    # Fields after "pid (comm)" start at field 3 (state); utime and stime are fields 14 and 15.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def server_lag(base_url: str) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(base_url + "/metrics/summary", timeout=10).json()
    lag: dict[str, Any] = data["models"]["fixed"]["lag"]
    return lag


def loadgen(base_url: str, concurrency: int, duration: float, max_tokens: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "loadgen.py"),
        f"--url={base_url}",
        "--model=fixed",
        f"--concurrency={concurrency}",
        f"--duration={duration}",
        f"--max-tokens={max_tokens}",
        f"--ttft={TTFT_MS / 1000}",
        f"--itl={ITL_MS / 1000}",
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def measure(server: ServerProcess, variant: str, level: int, rnd: int, args: argparse.Namespace) -> Run:
    httpx.delete(server.base_url + "/metrics/summary", timeout=10)
    cpu0 = process_cpu_seconds(server.process.pid)
    result = loadgen(server.base_url, level, args.duration, args.max_tokens)
    cpu = process_cpu_seconds(server.process.pid) - cpu0
    lag = server_lag(server.base_url)
    tokens = int(result["output_tokens"])
    return Run(
        variant=variant,
        level=level,
        round=rnd,
        cpu_s=cpu,
        tokens=tokens,
        cpu_us_per_token=cpu / tokens * 1e6 if tokens else float("nan"),
        tokens_per_s=float(result["output_tokens_per_s"]),
        lag_p50_ms=float(lag["p50"] or 0.0) * 1000,
        lag_p99_ms=float(lag["p99"] or 0.0) * 1000,
        client_loop_p99_ms=float(result["client_loop_lateness_p99_ms"]),
        errors=int(result["errors"]),
    )


def medians(runs: list[Run], variant: str, level: int) -> dict[str, float]:
    mine = [r for r in runs if r.variant == variant and r.level == level]
    keys = ("cpu_us_per_token", "tokens_per_s", "lag_p50_ms", "lag_p99_ms", "client_loop_p99_ms")
    return {k: statistics.median(getattr(r, k) for r in mine) for k in keys}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", type=Path, required=True, help="source root of the old tree (has simulator/)")
    p.add_argument("--b", type=Path, required=True, help="source root of the new tree")
    p.add_argument("--levels", default="50,200")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "token_path.json")
    args = p.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    roots = {"A": args.a.resolve(), "B": args.b.resolve()}
    for root in roots.values():
        if not (root / "simulator" / "llmsim").is_dir():
            p.error(f"{root} has no simulator/llmsim")
    runs: list[Run] = []
    with ExitStack() as stack:
        servers: dict[str, ServerProcess] = {}
        for variant, root in roots.items():
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            env = {"PYTHONPATH": str(root / "simulator")}
            servers[variant] = stack.enter_context(running_server(tmp, config=CONFIG, env=env))
            # Warm-up: first requests pay for imports and caches.
            loadgen(servers[variant].base_url, max(levels), 2.0, args.max_tokens)
        for rnd in range(args.rounds):
            order = ("A", "B") if rnd % 2 == 0 else ("B", "A")
            for level in levels:
                for variant in order:
                    run = measure(servers[variant], variant, level, rnd, args)
                    runs.append(run)
                    print(
                        f"round {rnd} {variant} streams={level:4d}  cpu/token={run.cpu_us_per_token:6.1f} us  "
                        f"tok/s={run.tokens_per_s:7.0f}  lag p50={run.lag_p50_ms:6.2f} ms p99={run.lag_p99_ms:7.2f} ms  "
                        f"client loop p99={run.client_loop_p99_ms:5.2f} ms  errors={run.errors}",
                        flush=True,
                    )
    summary: dict[str, Any] = {}
    print(f"\nmedians of {args.rounds} interleaved runs (A = {roots['A']}, B = {roots['B']}):")
    print("| streams | variant | CPU µs/token | tokens/s | lag p50 ms | lag p99 ms |")
    print("|---:|---|---:|---:|---:|---:|")
    for level in levels:
        a, b = medians(runs, "A", level), medians(runs, "B", level)
        summary[str(level)] = {"A": a, "B": b, "ratio_b_over_a": {k: b[k] / a[k] if a[k] else None for k in a}}
        for name, m in (("A", a), ("B", b)):
            print(
                f"| {level} | {name} | {m['cpu_us_per_token']:.1f} | {m['tokens_per_s']:.0f} | "
                f"{m['lag_p50_ms']:.2f} | {m['lag_p99_ms']:.2f} |"
            )
        print(
            f"| {level} | B/A | {b['cpu_us_per_token'] / a['cpu_us_per_token']:.2f} | "
            f"{b['tokens_per_s'] / a['tokens_per_s']:.2f} | | |"
        )
    out = {
        "benchmark": "token_path",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "roots": {k: str(v) for k, v in roots.items()},
        "ttft_ms": TTFT_MS,
        "itl_ms": ITL_MS,
        "max_tokens": args.max_tokens,
        "duration_s": args.duration,
        "rounds": args.rounds,
        "medians": summary,
        "runs": [asdict(r) for r in runs],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
