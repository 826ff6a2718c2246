"""Speed of virtual time: simulated seconds per wall-clock second, one replica and fleets.

Four cases on the same model (default: the seed design's example GPU and model, 80 GiB, 3,000
GB/s, 989 TFLOPS; 6.74 B parameters fp16, 512 KiB of KV per token: 7,609 blocks; or a model of a
models.yml with --config/--model), 512-token prompts and 256 output tokens:

1. baseline: ``simulate()`` (the single-replica core), Poisson arrivals at --rate for --duration;
2. the same workload through a one-replica fleet (``simulate_fleet``): the fleet loop's overhead;
3. one replica at a steady batch of 64: a closed loop of 64 clients;
4. ``simulate()`` at --fleet-rate-per-replica: one replica's share of case 5, the same small
   batches (the scheduler's fixed cost per step weighs more in a small batch);
5. a 16-replica fleet at moderate load behind least-requests with a 50 ms scrape: Poisson at
   16 x --fleet-rate-per-replica. Its cost per sequence-step against case 4 is the fleet's own.

The unit of work is a sequence-step (one sequence in one step); each case reports its cost per
sequence-step against the baseline's, measured in the same run. The machine is shared and
noisy: the cases run --repeat times, interleaved, and each reports its fastest run.

    .venv/bin/python bench/bench_plan.py [--rate 20] [--duration 120] [--repeat 3] [--quick]

Prints a table and writes bench/results/plan.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmsim.engine.scheduler import GpuSpec, ModelSpec, SchedulerParams, WorkloadItem, poisson_workload, simulate
from llmsim.fleet import (
    FleetSpec,
    ReplicaGroup,
    RouterSpec,
    WorkloadShape,
    closed_loop,
    from_items,
    generate,
    simulate_fleet,
)

ROOT = Path(__file__).resolve().parent.parent

SEED = SchedulerParams(
    gpu=GpuSpec(hbm_bytes=80 * 2**30, memory_bandwidth=3000e9, peak_flops=989e12),
    model=ModelSpec(num_parameters=6.74e9, weight_bytes=6.74e9 * 2, kv_bytes_per_token=524_288),
    context_length=32768,
)
PROMPT, OUTPUT = 512, 256


def params_for(config: str | None, model: str | None) -> tuple[str, SchedulerParams]:
    if model is None:
        return "seed-example", SEED
    from llmsim.config import load_models_config
    from llmsim.runtime import scheduler_params

    return model, scheduler_params(load_models_config(config), model)


def timed(run: Callable[[], tuple[float, int, int, int]], best: dict[str, Any] | None) -> dict[str, Any]:
    """Run a case: (simulated seconds, requests, steps, sequence-steps); keep the fastest of its runs."""
    start = time.perf_counter()
    simulated, requests, steps, seq_steps = run()
    wall = time.perf_counter() - start
    if best is not None and best["wall_s"] <= wall:
        best["runs"] += 1
        return best
    return {
        "runs": 1 if best is None else best["runs"] + 1,
        "simulated_s": simulated,
        "wall_s": wall,
        "speedup": simulated / wall,
        "requests": requests,
        "steps": steps,
        "mean_batch": seq_steps / steps if steps else 0.0,
        "sequence_steps": seq_steps,
        "us_per_sequence_step": wall / seq_steps * 1e6 if seq_steps else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=20.0, help="baseline Poisson arrivals per second")
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of arrivals (simulated)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case, interleaved; the fastest counts")
    ap.add_argument("--closed-requests", type=int, default=64 * 40, help="requests of the batch-64 closed loop")
    ap.add_argument("--fleet-rate-per-replica", type=float, default=10.0, help="16-replica fleet: req/s per replica")
    ap.add_argument("--fleet-duration", type=float, default=120.0, help="16-replica fleet: seconds of arrivals")
    ap.add_argument("--quick", action="store_true", help="a tenth of every duration and count (a smoke run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", help="models.yml (with --model)")
    ap.add_argument("--model", help="a scheduler model of --config (default: the seed design's example)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "plan.json")
    args = ap.parse_args()
    scale = 0.1 if args.quick else 1.0

    name, params = params_for(args.config, args.model)
    items = poisson_workload(args.rate, args.duration * scale, PROMPT, OUTPUT, args.seed)

    share = poisson_workload(args.fleet_rate_per_replica, args.fleet_duration * scale, PROMPT, OUTPUT, args.seed)

    def single(workload: list[WorkloadItem]) -> tuple[float, int, int, int]:
        result = simulate(params, workload)
        s = result.summary()
        return s.duration, s.num_requests, s.num_steps, sum(step.batch_size for step in result.steps)

    def fleet_run(fleet: FleetSpec, workload: Any) -> tuple[float, int, int, int]:
        result = simulate_fleet(fleet, workload)
        s = result.summary()
        return (
            s.duration,
            s.num_requests,
            sum(r.num_steps for r in result.replicas),
            sum(r.batch_total for r in result.replicas),
        )

    one = FleetSpec((ReplicaGroup(name, name, params, 1),), RouterSpec("round-robin", 0.0))
    sixteen = FleetSpec((ReplicaGroup(name, name, params, 16),), RouterSpec("least-requests", 0.05))
    fleet_shape = WorkloadShape(
        16 * args.fleet_rate_per_replica, args.fleet_duration * scale, PROMPT, OUTPUT, seed=args.seed
    )
    runs: dict[str, Callable[[], tuple[float, int, int, int]]] = {
        f"baseline: simulate(), Poisson {args.rate:g}/s": lambda: single(items),
        "one-replica fleet, same workload": lambda: fleet_run(one, from_items(items)),
        "one replica, closed loop of 64": lambda: fleet_run(
            one, closed_loop(64, int(args.closed_requests * scale), PROMPT, OUTPUT)
        ),
        f"simulate(), Poisson {args.fleet_rate_per_replica:g}/s (one replica's share)": lambda: single(share),
        f"16 replicas, least-requests, Poisson {fleet_shape.rate:g}/s": lambda: fleet_run(
            sixteen, generate(fleet_shape)
        ),
    }
    cases: dict[str, dict[str, Any]] = {}
    for _ in range(args.repeat):
        for label, run in runs.items():
            cases[label] = timed(run, cases.get(label))
    base_cost = next(iter(cases.values()))["us_per_sequence_step"]
    print(f"virtual-time speed, {name}, {PROMPT}-token prompts, {OUTPUT} output tokens")
    print(
        f"{'case':<46}{'requests':>9}{'steps':>10}{'batch':>7}{'simulated':>11}{'wall':>8}{'x real':>8}{'us/seq-step':>13}{'vs base':>9}"
    )
    for label, c in cases.items():
        c["cost_vs_baseline"] = c["us_per_sequence_step"] / base_cost if base_cost else None
        print(
            f"{label:<52}{c['requests']:>9,}{c['steps']:>10,}{c['mean_batch']:>7.1f}{c['simulated_s']:>10,.0f}s"
            f"{c['wall_s']:>7.1f}s{c['speedup']:>8,.0f}{c['us_per_sequence_step']:>13.2f}{c['cost_vs_baseline']:>9.2f}"
        )
    body: dict[str, Any] = {
        "model": name,
        "prompt_tokens": PROMPT,
        "output_tokens": OUTPUT,
        "quick": args.quick,
        "cases": cases,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(body, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
