"""``llmsim plan``: run a workload through a model's scheduler in virtual time and print its latencies.

    llmsim plan --model M (--workload FILE | --rate R --duration D --prompt-tokens N --output-tokens N
                           [--shared-prefix-tokens K])

A workload file is JSON lines or a YAML (or JSON) list of ``{arrival, prompt_tokens,
output_tokens[, abort_at, prompt_token_ids, output_token_ids, lora]}`` with arrival in seconds.
Requests with token ids share prefix-cache blocks with those that have the same leading ids;
requests without ids share nothing. ``--shared-prefix-tokens K`` gives every Poisson request the
same first K prompt tokens (a shared system prompt) and its own rest.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import yaml

from llmsim.config import load_models_config
from llmsim.config.loader import EMBEDDED_MODELS
from llmsim.engine.scheduler import SchedulerParams, SimulationSummary, WorkloadItem, poisson_workload, simulate
from llmsim.errors import ConfigError
from llmsim.runtime import scheduler_params


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("plan", help="simulate a workload in virtual time and print TTFT/ITL percentiles")
    p.add_argument("--config", default=os.environ.get("LLMSIM_CONFIG"), help="models.yml (default: embedded)")
    p.add_argument("--model", required=True, help="a model served with engine: scheduler")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--workload", type=Path, help="JSON lines or YAML list of {arrival, prompt_tokens, output_tokens}"
    )
    source.add_argument("--rate", type=float, help="Poisson arrivals per second (with --duration and token counts)")
    p.add_argument("--duration", type=float, help="seconds of arrivals (with --rate)")
    p.add_argument("--prompt-tokens", type=int, help="prompt length of every request (with --rate)")
    p.add_argument("--output-tokens", type=int, help="output length of every request (with --rate)")
    p.add_argument(
        "--shared-prefix-tokens",
        type=int,
        default=0,
        help="with --rate: the first N prompt tokens are the same in every request (a shared system prompt)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the Poisson arrivals (default 0)")
    p.add_argument("--json", type=Path, dest="json_path", help="also write the summary as JSON to this file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_models_config(args.config)
        file = str(args.config) if args.config else EMBEDDED_MODELS
        names = [m.name for m in config.models]
        if args.model not in names:
            raise ConfigError(file, f"no model named '{args.model}' (models: {', '.join(names)})")
        if config.model(args.model).engine != "scheduler":
            raise ConfigError(file, f"model '{args.model}' does not use engine 'scheduler'")
        params = scheduler_params(config, args.model, file)
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


def _workload(args: argparse.Namespace) -> list[WorkloadItem]:
    if args.workload is not None:
        return load_workload(args.workload)
    missing = [
        f"--{n}" for n in ("duration", "prompt-tokens", "output-tokens") if getattr(args, n.replace("-", "_")) is None
    ]
    if missing:
        raise ValueError(f"--rate needs {', '.join(missing)}")
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


def load_workload(path: Path) -> list[WorkloadItem]:
    """Read a workload file: JSON lines (one object per line) or a YAML/JSON list of objects."""
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    raw: Any
    if stripped.startswith("{"):
        raw = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        raw = yaml.safe_load(text)
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list of requests")
    items: list[WorkloadItem] = []
    for i, entry in enumerate(raw):
        try:
            abort_at = entry.get("abort_at")
            item = WorkloadItem(
                arrival=float(entry["arrival"]),
                prompt_tokens=int(entry["prompt_tokens"]),
                output_tokens=int(entry["output_tokens"]),
                abort_at=None if abort_at is None else float(abort_at),
                prompt_token_ids=_ids(entry.get("prompt_token_ids")),
                output_token_ids=_ids(entry.get("output_token_ids")),
                lora_name=None if entry.get("lora") is None else str(entry["lora"]),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"{path}: request {i}: needs numeric arrival, prompt_tokens, output_tokens ({exc})"
            ) from None
        if item.prompt_tokens < 0 or item.output_tokens < 0 or not math.isfinite(item.arrival):
            raise ValueError(f"{path}: request {i}: token counts must be >= 0 and arrival finite")
        ids = item.prompt_token_ids
        if ids is not None and len(ids) != item.prompt_tokens:
            raise ValueError(
                f"{path}: request {i}: prompt_token_ids has {len(ids)} ids, prompt_tokens is {item.prompt_tokens}"
            )
        items.append(item)
    return items


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
        f"speed-up    {s.duration:,.1f} s simulated in {wall:,.2f} s wall = {speedup(s.duration, wall):,.0f}x real time",
    ]
    return "\n".join(lines)


def speedup(simulated: float, wall: float) -> float:
    return simulated / wall if wall > 0 else math.inf


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
    }
    result: dict[str, Any] = clean(body)
    return result
