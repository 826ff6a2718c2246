"""``llmsim plan``: run a workload through one replica, or a fleet behind a router, in virtual time.

    llmsim plan (--model M [--replicas N] | --fleet fleet.yml)
                (--workload trace.jsonl | --rate R --duration D --prompt-tokens N --output-tokens N
                 [--shared-prefix-tokens K] | --concurrency C --num-requests N ...)
                [--router R] [--compare R1,R2,...] [--rates R1,R2,... --slo ttft_p99=500]
                [--replicas-for-slo --slo ...]

One path for one replica and many: ``--model`` alone is a fleet of one replica of it, run by the
same event loop, printed by the same table (without the fleet's row) and written as the same JSON.

A workload file is a trace: JSON lines or a YAML (or JSON) list of ``{arrival, prompt_tokens,
output_tokens[, abort_at, adapter]}`` with arrival in seconds, or with the prompt given as token
ids or as a shared prefix group (see ``llmsim.fleet.trace_file``). A request naming a LoRA adapter
the replicas do not serve is an error naming the file, the line and the adapter (vLLM answers 404).

Requests with token ids (or prefix groups) share prefix-cache blocks with those that have the same
leading ids; requests known only by their length share nothing. ``--shared-prefix-tokens K`` starts
every generated prompt with the same K tokens (a shared system prompt: ``--system-prompt-tokens K``
with the rest of ``--prompt-tokens`` the request's own).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from llmsim.config import ModelsConfig, load_models_config
from llmsim.config.loader import EMBEDDED_MODELS
from llmsim.engine.scheduler import SchedulerParams
from llmsim.errors import ConfigError
from llmsim.fleet import (
    ARRIVAL_PATTERNS,
    ROUTER_POLICIES,
    FleetSpec,
    FleetWorkload,
    ReplicaGroup,
    RouterPolicy,
    Slo,
    SloTarget,
    WorkloadShape,
    closed_loop,
    compare_routers,
    generate,
    load_fleet,
    load_trace,
    plan_fleet,
    replicas_for_slo,
    sweep_rates,
)
from llmsim.fleet.report import (
    comparison_json,
    format_comparison,
    format_plan,
    format_search,
    format_sweep,
    plan_json,
    search_json,
    sweep_json,
)
from llmsim.fleet.simulation import served_adapters
from llmsim.runtime import scheduler_params


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "plan", help="simulate a workload on one replica or a fleet in virtual time and print its latencies"
    )
    p.add_argument("--config", default=os.environ.get("LLMSIM_CONFIG"), help="models.yml (default: embedded)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--model", help="a model served with engine: scheduler")
    target.add_argument("--fleet", type=Path, help="a fleet file: replicas of models.yml models behind a router")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--workload", type=Path, help="a trace: JSON lines or a YAML list of requests")
    source.add_argument("--rate", type=float, help="arrivals per second (with --duration and token counts)")
    source.add_argument(
        "--concurrency", type=int, help="closed loop: this many clients back to back (with --num-requests)"
    )
    p.add_argument("--duration", type=float, help="seconds of arrivals (with --rate or --rates)")
    p.add_argument("--prompt-tokens", type=int, help="prompt length of every request (of every turn's message)")
    p.add_argument("--output-tokens", type=int, help="output length of every request")
    p.add_argument("--num-requests", type=int, help="requests in all (with --concurrency)")
    p.add_argument(
        "--shared-prefix-tokens",
        type=int,
        default=0,
        help="with --rate: the first N of --prompt-tokens are the same in every request (a shared system prompt)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the generated workload (default 0)")
    shapes = p.add_argument_group("workload shapes (with --rate or --rates)")
    shapes.add_argument("--arrivals", choices=ARRIVAL_PATTERNS, help="arrival pattern (default poisson)")
    shapes.add_argument("--burst-size", type=int, help="requests per burst (--arrivals bursts)")
    shapes.add_argument("--system-prompt-tokens", type=int, help="a shared system prompt before every prompt")
    shapes.add_argument("--system-prompts", type=int, help="distinct system prompts, one per conversation at random")
    shapes.add_argument("--turns", type=int, help="turns per conversation (--rate then counts conversations)")
    shapes.add_argument("--think-time", type=float, help="seconds between an answer and the next turn")
    fleet = p.add_argument_group("fleet")
    fleet.add_argument("--router", choices=ROUTER_POLICIES, help="the router (overrides the fleet file's)")
    fleet.add_argument("--replicas", type=int, help="with --model: a fleet of this many replicas of it")
    fleet.add_argument("--scrape-interval-ms", type=float, help="how old the router's view may be (0: live)")
    fleet.add_argument(
        "--compare",
        help="comma-separated routers: the same workload behind each, one table (a P/D fleet: beside the same "
        "GPUs aggregated; data-parallel replicas: routed by replica, then by rank)",
    )
    fleet.add_argument("--rates", help="comma-separated rates: the highest that meets --slo")
    fleet.add_argument("--replicas-for-slo", action="store_true", help="the fewest replicas that meet --slo")
    fleet.add_argument("--vary", help="the replica group --replicas-for-slo varies (when the fleet has several)")
    fleet.add_argument("--max-replicas", type=int, default=256, help="--replicas-for-slo gives up here (256)")
    fleet.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="METRIC_STAT=MS",
        help="a target, e.g. ttft_p99=500 or itl_p50=30 (ms; 's' suffix for seconds); repeatable",
    )
    p.add_argument("--json", type=Path, dest="json_path", help="also write the results as JSON to this file")
    p.set_defaults(func=run)


def _model_params(config: ModelsConfig, model: str, file: str) -> SchedulerParams:
    names = [m.name for m in config.models]
    if model not in names:
        raise ConfigError(file, f"no model named '{model}' (models: {', '.join(names)})")
    if config.model(model).engine != "scheduler":
        raise ConfigError(file, f"model '{model}' does not use engine 'scheduler'")
    return scheduler_params(config, model, file)


def _missing(args: argparse.Namespace, flag: str, needed: tuple[str, ...]) -> None:
    missing = [f"--{n}" for n in needed if getattr(args, n.replace("-", "_")) is None]
    if missing:
        raise ValueError(f"{flag} needs {', '.join(missing)}")


def run(args: argparse.Namespace) -> int:
    try:
        config = load_models_config(args.config)
        file = str(args.config) if args.config else EMBEDDED_MODELS
        fleet = _fleet(args, config, file)
        slo = Slo(tuple(SloTarget.parse(t) for t in args.slo))
        actions = [a for a in ("compare", "rates") if getattr(args, a) is not None]
        actions += ["replicas-for-slo"] if args.replicas_for_slo else []
        if len(actions) > 1:
            raise ValueError(f"--{' and --'.join(actions)} cannot be combined")
        if (args.rates is not None or args.replicas_for_slo) and not slo.targets:
            raise ValueError(f"--{actions[0]} needs at least one --slo")
        if slo.targets and not (args.rates is not None or args.replicas_for_slo):
            raise ValueError("--slo goes with --rates or --replicas-for-slo")
        if args.rates is not None:
            return _run_sweep(args, fleet, slo)
        workload = _fleet_workload(args, fleet)
        if args.compare is not None:
            return _run_compare(args, fleet, workload)
        if args.replicas_for_slo:
            return _run_search(args, fleet, workload, slo)
        wall_start = time.perf_counter()
        plan = plan_fleet(fleet, workload)
        wall = time.perf_counter() - wall_start
    except (ConfigError, ValueError, OSError) as exc:
        print(f"llmsim plan: {exc}", file=sys.stderr)
        return 2
    print(format_plan(plan, wall))
    _write_json(args, plan_json(plan, wall))
    return 0


def _fleet(args: argparse.Namespace, config: ModelsConfig, file: str) -> FleetSpec:
    if args.fleet is not None:
        if args.replicas is not None:
            raise ValueError("--replicas goes with --model (a fleet file gives its own counts)")
        fleet = load_fleet(args.fleet, config, file)
    else:
        params = _model_params(config, args.model, file)
        count = 1 if args.replicas is None else args.replicas
        if count < 1:
            raise ValueError("--replicas must be >= 1")
        dp = config.model(args.model).data_parallel
        ranks = dp.size if dp.rank is None else 1
        group = ReplicaGroup(args.model, args.model, params, count, ranks, dp.load_balancing == "external")
        fleet = FleetSpec((group,))
    router = fleet.router
    if args.router is not None:
        # Both picks of a disaggregated fleet, too.
        router = dataclasses.replace(router, policy=args.router, prefill_policy=None, decode_policy=None)
    if args.scrape_interval_ms is not None:
        router = dataclasses.replace(router, scrape_interval=args.scrape_interval_ms / 1000.0)
    return FleetSpec(fleet.groups, router)


def _shape(args: argparse.Namespace, rate: float) -> WorkloadShape:
    fields = {
        "arrivals": args.arrivals,
        "burst_size": args.burst_size,
        "system_prompt_tokens": args.system_prompt_tokens,
        "system_prompts": args.system_prompts,
        "turns": args.turns,
        "think_time": args.think_time,
    }
    given = {k: v for k, v in fields.items() if v is not None}
    prompt_tokens = args.prompt_tokens
    shared = args.shared_prefix_tokens
    if shared:
        if args.system_prompt_tokens is not None:
            raise ValueError("--shared-prefix-tokens and --system-prompt-tokens cannot be combined")
        if prompt_tokens is None or not 0 < shared <= prompt_tokens:
            raise ValueError("--shared-prefix-tokens must be between 1 and --prompt-tokens")
        given["system_prompt_tokens"] = shared
        prompt_tokens -= shared
    return WorkloadShape(rate, args.duration, prompt_tokens, args.output_tokens, seed=args.seed, **given)


def _shape_flags(args: argparse.Namespace) -> list[str]:
    names = ("arrivals", "burst_size", "system_prompt_tokens", "system_prompts", "turns", "think_time")
    flags = ["--" + n.replace("_", "-") for n in names if getattr(args, n) is not None]
    return flags + (["--shared-prefix-tokens"] if args.shared_prefix_tokens else [])


def _fleet_workload(args: argparse.Namespace, fleet: FleetSpec) -> FleetWorkload:
    if args.workload is not None or args.concurrency is not None:
        flags = _shape_flags(args)
        if flags:
            raise ValueError(f"{', '.join(flags)} go with --rate or --rates")
    if args.workload is not None:
        return load_trace(args.workload, served_adapters(fleet), disaggregated=fleet.disaggregated)
    if args.concurrency is not None:
        _missing(args, "--concurrency", ("num-requests", "prompt-tokens", "output-tokens"))
        return closed_loop(args.concurrency, args.num_requests, args.prompt_tokens, args.output_tokens)
    if args.rate is None:
        raise ValueError("give --workload, --rate or --concurrency")
    _missing(args, "--rate", ("duration", "prompt-tokens", "output-tokens"))
    return generate(_shape(args, args.rate))


def _policies(text: str) -> list[RouterPolicy]:
    policies: list[RouterPolicy] = []
    for name in (n.strip() for n in text.split(",")):
        match = next((p for p in ROUTER_POLICIES if p == name), None)
        if match is None:
            raise ValueError(f"--compare: unknown router '{name}' (routers: {', '.join(ROUTER_POLICIES)})")
        policies.append(match)
    return policies


def _run_compare(args: argparse.Namespace, fleet: FleetSpec, workload: FleetWorkload) -> int:
    policies = _policies(args.compare)
    wall_start = time.perf_counter()
    plans = compare_routers(fleet, workload, policies)
    wall = time.perf_counter() - wall_start
    print(format_comparison(plans, wall))
    _write_json(args, comparison_json(plans, wall))
    return 0


def _run_sweep(args: argparse.Namespace, fleet: FleetSpec, slo: Slo) -> int:
    if args.workload is not None or args.concurrency is not None or args.rate is not None:
        raise ValueError(
            "--rates generates its own workload: give --duration and token counts, not --workload, --rate or --concurrency"
        )
    _missing(args, "--rates", ("duration", "prompt-tokens", "output-tokens"))
    try:
        rates = [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        raise ValueError(f"--rates: expected comma-separated numbers, got '{args.rates}'") from None
    if not rates or any(r <= 0 for r in rates):
        raise ValueError("--rates: every rate must be > 0")
    shape = _shape(args, rates[0])
    wall_start = time.perf_counter()
    sweep = sweep_rates(fleet, shape, rates, slo)
    wall = time.perf_counter() - wall_start
    print(format_sweep(sweep, slo, wall))
    _write_json(args, sweep_json(sweep, slo, wall))
    return 0


def _run_search(args: argparse.Namespace, fleet: FleetSpec, workload: FleetWorkload, slo: Slo) -> int:
    wall_start = time.perf_counter()
    search = replicas_for_slo(fleet, workload, slo, group=args.vary, max_replicas=args.max_replicas)
    wall = time.perf_counter() - wall_start
    print(format_search(search, slo, wall))
    _write_json(args, search_json(search, slo, wall))
    return 0


def _write_json(args: argparse.Namespace, body: dict[str, Any]) -> None:
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(body, indent=2) + "\n")
