"""``llmsim plan``: run a workload through one replica, or a fleet behind a router, in virtual time.

    llmsim plan --model M (--workload FILE | --rate R --duration D --prompt-tokens N --output-tokens N
                           [--shared-prefix-tokens K])
    llmsim plan --fleet fleet.yml (--workload trace.jsonl | --rate R ... | --concurrency C --num-requests N ...)
                [--router R] [--compare R1,R2,...] [--rates R1,R2,... --slo ttft_p99=500]
                [--replicas-for-slo --slo ...]

A workload file is a trace: JSON lines or a YAML (or JSON) list of ``{arrival, prompt_tokens,
output_tokens[, abort_at]}`` with arrival in seconds, or with the prompt given as token ids or as
a shared prefix group (see ``llmsim.fleet.trace_file``). ``--model`` with only the single-replica
flags prints the single-replica table; any fleet flag (``--replicas``, ``--router``,
``--concurrency``, a workload shape, a sweep) runs ``--model`` as a fleet.

Requests with token ids (or prefix groups) share prefix-cache blocks with those that have the same
leading ids; requests known only by their length share nothing. ``--shared-prefix-tokens K`` gives
every Poisson request of a single replica the same first K prompt tokens (a shared system prompt).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from llmsim.config import ModelsConfig, load_models_config
from llmsim.config.loader import EMBEDDED_MODELS
from llmsim.engine.scheduler import SchedulerParams, SimulationSummary, WorkloadItem, poisson_workload
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
    simulate,
    sweep_rates,
)
from llmsim.fleet.report import (
    comparison_json,
    compiled_core,
    format_comparison,
    format_plan,
    format_search,
    format_sweep,
    plan_json,
    search_json,
    speed_line,
    speedup,
    sweep_json,
)
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
        help="with --rate and --model: the first N prompt tokens are the same in every request (a shared system prompt)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the generated workload (default 0)")
    shapes = p.add_argument_group("workload shapes (with --rate or --rates; any of them runs a fleet)")
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
    fleet.add_argument("--compare", help="comma-separated routers: the same workload behind each, one table")
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


_FLEET_FLAGS = (
    "fleet",
    "concurrency",
    "arrivals",
    "burst_size",
    "system_prompt_tokens",
    "system_prompts",
    "turns",
    "think_time",
    "router",
    "replicas",
    "scrape_interval_ms",
    "compare",
    "rates",
    "vary",
)


def run(args: argparse.Namespace) -> int:
    if any(getattr(args, name) is not None for name in _FLEET_FLAGS) or args.replicas_for_slo or args.slo:
        return run_fleet(args)
    try:
        config = load_models_config(args.config)
        file = str(args.config) if args.config else EMBEDDED_MODELS
        params = _model_params(config, args.model, file)
        workload = _workload(args)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"llmsim plan: {exc}", file=sys.stderr)
        return 2
    wall_start = time.perf_counter()
    try:
        result = simulate(params, workload)
    except ValueError as exc:
        print(f"llmsim plan: {exc}", file=sys.stderr)
        return 2
    wall = time.perf_counter() - wall_start
    summary = result.summary()
    print(format_summary(args.model, params, summary, wall))
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(summary_json(args.model, params, summary, wall), indent=2) + "\n")
    return 0


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


def _workload(args: argparse.Namespace) -> list[WorkloadItem]:
    if args.workload is not None:
        return load_workload(args.workload)
    if args.rate is None:
        raise ValueError("give --workload or --rate")
    _missing(args, "--rate", ("duration", "prompt-tokens", "output-tokens"))
    items = poisson_workload(args.rate, args.duration, args.prompt_tokens, args.output_tokens, args.seed)
    shared = args.shared_prefix_tokens
    if shared:
        if not 0 < shared <= args.prompt_tokens:
            raise ValueError("--shared-prefix-tokens must be between 1 and --prompt-tokens")
        items = with_shared_prefix(items, shared)
    return items


#: Token ids of the shared prefix start here; each request's own tokens lie above SHARED_PREFIX_IDS
#: + its index x prompt length, so no two requests share anything but the prefix.
SHARED_PREFIX_IDS = 1_000
UNIQUE_IDS = 1_000_000


def with_shared_prefix(items: list[WorkloadItem], shared: int) -> list[WorkloadItem]:
    """The same requests, each with token ids: ``shared`` common leading tokens, then tokens of its own."""
    prefix = tuple(range(SHARED_PREFIX_IDS, SHARED_PREFIX_IDS + shared))
    out = []
    for i, item in enumerate(items):
        own = item.prompt_tokens - shared
        base = UNIQUE_IDS + i * item.prompt_tokens
        out.append(replace(item, prompt_token_ids=prefix + tuple(range(base, base + own))))
    return out


def load_workload(path: Path, *, token_ids: bool = True) -> list[WorkloadItem]:
    """A trace as the single-replica workload.

    With ``token_ids`` each request carries its prompt's token ids (explicit ones, or those of its
    prefix group), so requests that share a prefix share prefix-cache blocks; without, only counts.
    """
    return [
        WorkloadItem(
            r.arrival,
            r.prompt_tokens,
            r.output_tokens,
            r.abort_at,
            prompt_token_ids=tuple(r.prompt.token_ids()) if token_ids else None,
            lora_name=r.adapter,
        )
        for r in load_trace(path).requests
    ]


# -- fleets -----------------------------------------------------------------------------------


def run_fleet(args: argparse.Namespace) -> int:
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
        workload = _fleet_workload(args)
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
        fleet = FleetSpec((ReplicaGroup(args.model, args.model, params, count),))
    router = fleet.router
    if args.router is not None:
        router = dataclasses.replace(router, policy=args.router)
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
    return WorkloadShape(rate, args.duration, args.prompt_tokens, args.output_tokens, seed=args.seed, **given)


def _shape_flags(args: argparse.Namespace) -> list[str]:
    names = ("arrivals", "burst_size", "system_prompt_tokens", "system_prompts", "turns", "think_time")
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n) is not None]


def _fleet_workload(args: argparse.Namespace) -> FleetWorkload:
    if args.workload is not None or args.concurrency is not None:
        flags = _shape_flags(args)
        if flags:
            raise ValueError(f"{', '.join(flags)} go with --rate or --rates")
    if args.workload is not None:
        return load_trace(args.workload)
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


def _ids(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and v >= 0 for v in value):
        raise ValueError("token ids must be a list of non-negative integers")
    return tuple(value)


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1000:,.1f}"


def format_summary(model: str, params: SchedulerParams, s: SimulationSummary, wall: float) -> str:
    """The human-readable table."""
    lines = [
        f"llmsim plan: {model}, {s.num_requests:,} requests, {s.duration:,.1f} s simulated",
        f"{'':<12}{'p50':>12}{'p90':>12}{'p99':>12}{'mean':>12}   (ms)",
    ]
    for label, p in (("TTFT", s.ttft), ("ITL", s.itl), ("E2E", s.e2e), ("queue time", s.queue_time)):
        lines.append(f"{label:<12}{_ms(p.p50):>12}{_ms(p.p90):>12}{_ms(p.p99):>12}{_ms(p.mean):>12}")
    peak = s.kv_peak_used_blocks / s.kv_total_blocks if s.kv_total_blocks else 0.0
    if params.enable_prefix_caching:
        rate = "-" if math.isnan(s.prefix_cache_hit_rate) else f"{s.prefix_cache_hit_rate:.1%}"
        prefix = (
            f"prefix      {s.prefix_cache_hits:,} of {s.prefix_cache_queries:,} prompt tokens hit the cache"
            f" (hit rate {rate})"
        )
    else:
        prefix = "prefix      caching off"
    lines += [
        f"throughput  {s.requests_per_s:,.2f} req/s, {s.output_tokens_per_s:,.0f} output tok/s"
        f" ({s.num_finished:,} finished, {s.num_aborted:,} aborted, {s.num_rejected:,} refused: queue full)",
        f"batch       {s.num_steps:,} steps, mean batch {s.mean_batch_size:.1f},"
        f" max {params.max_num_sequences} sequences / {params.max_batch_tokens} tokens",
        f"KV cache    {s.kv_total_blocks + 1:,} blocks of {params.block_size} tokens ({s.kv_total_blocks:,} usable),"
        f" peak {s.kv_peak_used_blocks:,} used ({peak:.1%}), {s.num_preemptions:,} preemptions",
        prefix,
        speed_line(s.duration, wall),
    ]
    return "\n".join(lines)


def summary_json(model: str, params: SchedulerParams, s: SimulationSummary, wall: float) -> dict[str, Any]:
    """The summary as plain JSON values (NaN becomes null)."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    body = asdict(s) | {
        "model": model,
        "output_tokens_per_s": s.output_tokens_per_s,
        "requests_per_s": s.requests_per_s,
        "block_size": params.block_size,
        "prefix_cache_hit_rate": s.prefix_cache_hit_rate,
        "wall_seconds": wall,
        "speedup": speedup(s.duration, wall),
        "compiled_core": compiled_core(),
    }
    result: dict[str, Any] = clean(body)
    return result
