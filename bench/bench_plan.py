"""Speed of the scheduler engine in virtual time: simulated seconds per wall-clock second.

Runs an open-loop workload (seeded Poisson arrivals, fixed prompt and output lengths) through
``simulate()`` - no server, no clock - on the seed design's example GPU and model (80 GiB,
3,000 GB/s, 989 TFLOPS; 6.74 B parameters fp16, 512 KiB of KV per token: 7,609 blocks), or on a
model of a models.yml with --config/--model.

    .venv/bin/python bench/bench_plan.py [--rate 20] [--duration 600] [--prompt-tokens 512] [--output-tokens 256]

Prints the plan table and writes bench/results/plan.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from llmsim.commands.plan import format_summary, summary_json
from llmsim.engine.scheduler import GpuSpec, ModelSpec, SchedulerParams, poisson_workload, simulate

ROOT = Path(__file__).resolve().parent.parent

SEED = SchedulerParams(
    gpu=GpuSpec(hbm_bytes=80 * 2**30, memory_bandwidth=3000e9, peak_flops=989e12),
    model=ModelSpec(num_parameters=6.74e9, weight_bytes=6.74e9 * 2, kv_bytes_per_token=524_288),
    context_length=32768,
)


def params_for(config: str | None, model: str | None) -> tuple[str, SchedulerParams]:
    if model is None:
        return "seed-example", SEED
    from llmsim.config import load_models_config
    from llmsim.runtime import scheduler_params

    return model, scheduler_params(load_models_config(config), model)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=20.0, help="Poisson arrivals per second")
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of arrivals (simulated)")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", help="models.yml (with --model)")
    ap.add_argument("--model", help="a scheduler model of --config (default: the seed design's example)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "plan.json")
    args = ap.parse_args()

    name, params = params_for(args.config, args.model)
    workload = poisson_workload(args.rate, args.duration, args.prompt_tokens, args.output_tokens, args.seed)
    start = time.perf_counter()
    result = simulate(params, workload)
    wall = time.perf_counter() - start
    summary = result.summary()
    print(format_summary(name, params, summary, wall))

    body: dict[str, Any] = {
        "workload": {
            "rate": args.rate,
            "duration": args.duration,
            "prompt_tokens": args.prompt_tokens,
            "output_tokens": args.output_tokens,
            "seed": args.seed,
        },
        "summary": summary_json(name, params, summary, wall),
        "steps_per_wall_second": summary.num_steps / wall if wall > 0 else None,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(body, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
