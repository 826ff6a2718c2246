"""Speed of virtual time for a disaggregated prefill/decode fleet, against an aggregated fleet of
the same GPUs under the same workload (goal: the P/D fleet within 1.5x the aggregated one's CPU time).

Both fleets are 8 GPUs of a reference model of Llama 2 7B's shape on an 80 GiB GPU (3,000 GB/s,
989 TFLOPS; 512 KiB of KV per token) behind least-requests with a 50 ms scrape: 3 prefill + 5
decode replicas with a 50 GB/s link (kv_transfer's default), or 8 replicas serving whole requests.
The workload is Poisson at --rate for --duration, 2,000-token prompts and 256 output tokens. A P/D
request is two legs on two replicas and a pull; the aggregated fleet's decode runs hold more
sequences, so the ratio says what the hand-off costs the planner, not which fleet is faster.

Each fleet runs --repeat times, interleaved; the fastest run counts (process CPU time).

    .venv/bin/python bench/bench_plan_pd.py [--rate 30] [--duration 120] [--repeat 3] [--quick]

Prints a table and writes bench/results/plan_pd.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from llmsim.engine.scheduler import GpuSpec, ModelSpec, SchedulerParams
from llmsim.engine.scheduler.kv_link import KVLinkSpec
from llmsim.fleet import FleetSpec, FleetWorkload, ReplicaGroup, RouterSpec, WorkloadShape, generate, simulate_fleet
from llmsim.fleet.simulation import collector_paused

ROOT = Path(__file__).resolve().parent.parent
PARAMS = SchedulerParams(
    gpu=GpuSpec(hbm_bytes=80 * 2**30, memory_bandwidth=3000e9, peak_flops=989e12),
    model=ModelSpec(num_parameters=6.74e9, weight_bytes=6.74e9 * 2, kv_bytes_per_token=524_288),
    context_length=32768,
)
LINK = KVLinkSpec.from_config(50.0, 0.5)
GOAL = 1.5


def fleets() -> dict[str, FleetSpec]:
    router = RouterSpec("least-requests", 0.05)
    pd = FleetSpec(
        (
            ReplicaGroup("prefill", "ref", PARAMS, 3, kv_role="kv_producer", kv_link=LINK),
            ReplicaGroup("decode", "ref", PARAMS, 5, kv_role="kv_consumer", kv_link=LINK),
        ),
        router,
    )
    return {"P/D, 3 prefill + 5 decode": pd, "aggregated, 8 replicas": pd.aggregated()}


def run(fleet: FleetSpec, workload: FleetWorkload) -> tuple[float, dict[str, Any]]:
    with collector_paused():
        start = time.process_time()
        result = simulate_fleet(fleet, workload)
        cpu = time.process_time() - start
    s = result.summary()
    return cpu, {
        "simulated_s": s.duration,
        "requests": s.num_requests,
        "finished": s.num_finished,
        "steps": sum(r.num_steps for r in result.replicas),
        "ttft_p50_ms": s.latencies.ttft.p50 * 1000,
        "itl_p99_ms": s.latencies.itl.p99 * 1000,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=30.0, help="Poisson arrivals per second")
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of arrivals (simulated)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per fleet, interleaved; the fastest counts")
    ap.add_argument("--quick", action="store_true", help="a tenth of the duration, one run (a smoke run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "plan_pd.json")
    args = ap.parse_args()
    duration = args.duration * (0.1 if args.quick else 1.0)
    repeat = 1 if args.quick else args.repeat
    workload = generate(WorkloadShape(args.rate, duration, 2000, 256, seed=args.seed))
    cases = fleets()
    best: dict[str, float] = {}
    facts: dict[str, dict[str, Any]] = {}
    for _ in range(repeat):
        for label, fleet in cases.items():
            cpu, fact = run(fleet, workload)
            best[label] = min(best.get(label, cpu), cpu)
            facts[label] = fact
    pd_label, agg_label = cases
    ratio = best[pd_label] / best[agg_label]
    print(f"bench_plan_pd: Poisson {args.rate:g}/s for {duration:g} s, 2,000-token prompts, 256 output tokens")
    print(f"{'fleet':<28}{'CPU s':>8}{'simulated s':>13}{'x real time':>13}{'steps':>9}{'TTFT p50':>10}{'ITL p99':>9}")
    for label in cases:
        f = facts[label]
        speed = f["simulated_s"] / best[label] if best[label] > 0 else float("inf")
        print(
            f"{label:<28}{best[label]:>8.2f}{f['simulated_s']:>13.1f}{speed:>13,.0f}{f['steps']:>9,}"
            f"{f['ttft_p50_ms']:>10.1f}{f['itl_p99_ms']:>9.1f}"
        )
    verdict = "meets" if ratio <= GOAL else "misses"
    print(f"P/D / aggregated CPU time: {ratio:.2f}x ({verdict} the goal of {GOAL:g}x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "rate": args.rate,
        "duration": duration,
        "repeat": repeat,
        "cases": {label: {"cpu_s": best[label], **facts[label]} for label in cases},
        "ratio": ratio,
        "goal": GOAL,
        "meets_goal": ratio <= GOAL,
        "python": platform.python_version(),
    }
    args.out.write_text(json.dumps(body, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
