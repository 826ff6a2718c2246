"""Fleet results as tables for people and as JSON for tools."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from llmsim.engine.scheduler.percentiles import Percentiles
from llmsim.fleet import simulation
from llmsim.fleet.fleet_summary import FleetSummary, Latencies, ReplicaSummary
from llmsim.fleet.planner import FleetPlan, RateSweep, ReplicaSearch, Slo
from llmsim.fleet.spec import FleetSpec, ReplicaGroup


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1000:,.1f}"


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0%}"


def _hit(x: float) -> str:
    """A prefix-cache hit rate; "-" where nothing was looked up (caching off)."""
    return "-" if math.isnan(x) else f"{x:.1%}"


def _group_label(g: ReplicaGroup) -> str:
    details = [g.model] if g.model != g.name else []
    role = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "kv_both"}.get(g.kv_role or "", "")
    if role and role != g.name:
        details.append(role)
    if g.data_parallel > 1:
        details.append(f"{g.data_parallel} DP ranks" + (", external LB" if g.external_lb else ""))
    return f"{g.count} x {g.name}" + (f" ({', '.join(details)})" if details else "")


def router_label(fleet: FleetSpec) -> str:
    """The router's name, and how it reaches data-parallel ranks when the fleet has some."""
    r = fleet.router
    label: str = r.policy
    if fleet.disaggregated:
        label = r.prefill if r.prefill == r.decode else f"{r.prefill}/{r.decode}"
    if fleet.has_data_parallel and r.dp_aware:
        label += " (ranks)"
    return label


def describe_fleet(fleet: FleetSpec) -> str:
    """``6 replicas (4 x h100, 2 x a100) behind least-requests (scrape every 50 ms)``."""
    groups = ", ".join(_group_label(g) for g in fleet.groups)
    n = fleet.num_replicas
    if fleet.num_gpus == 1:
        # No routing to speak of.
        (group,) = [g for g in fleet.groups if g.count]
        return f"1 replica of {group.model}"
    r = fleet.router
    view = f"scrape every {r.scrape_interval * 1000:g} ms" if r.scrape_interval > 0 else "live view"
    weights = ""
    if r.policy == "weighted":
        w = r.weights
        weights = f", weights queue {w.queue:g} / kv {w.kv_cache:g} / prefix {w.prefix:g}"
    gpus = ""
    if fleet.disaggregated:
        policy = r.prefill if r.prefill == r.decode else f"prefill {r.prefill}, decode {r.decode}"
        return f"{n} replicas ({groups}) behind a P/D router: {policy} ({view}{weights})"
    if fleet.has_data_parallel:
        ranks = "sees every rank" if r.dp_aware else "sees replicas, vLLM's internal LB picks ranks"
        gpus = f", {fleet.num_gpus} GPUs; the router {ranks}"
    plural = "replica" if n == 1 else "replicas"
    return f"{n} {plural} ({groups}) behind {r.policy} ({view}{weights}{gpus})"


_HEADER = (
    f"{'':<16}{'requests':>9}{'TTFT p50':>10}{'p99':>9}{'ITL p50':>9}{'p99':>8}{'TPOT p50':>10}"
    f"{'E2E p99':>10}{'queue p99':>10}{'out tok/s':>11}{'busy':>6}{'batch':>7}{'preempt':>9}{'KV peak':>9}"
    f"{'prefix hit':>11}"
)


def _row(
    label: str, requests: int, lat: Latencies, tok_s: float, busy: str, batch: str, preempt: int, kv: str, hit: float
) -> str:
    return (
        f"{label:<16}{requests:>9,}{_ms(lat.ttft.p50):>10}{_ms(lat.ttft.p99):>9}{_ms(lat.itl.p50):>9}"
        f"{_ms(lat.itl.p99):>8}{_ms(lat.tpot.p50):>10}{_ms(lat.e2e.p99):>10}{_ms(lat.queue_time.p99):>10}"
        f"{tok_s:>11,.0f}{busy:>6}{batch:>7}{preempt:>9,}{kv:>9}{_hit(hit):>11}"
    )


def _replica_row(r: ReplicaSummary, duration: float) -> str:
    tok_s = r.output_tokens / duration if duration > 0 else math.nan
    kv = r.kv_peak_used_blocks / r.kv_total_blocks if r.kv_total_blocks else math.nan
    return _row(
        r.name,
        r.num_requests,
        r.latencies,
        tok_s,
        _pct(r.busy_fraction),
        f"{r.mean_batch_size:.1f}",
        r.num_preemptions,
        _pct(kv),
        r.prefix_hit_rate,
    )


def format_plan(plan: FleetPlan, wall: float) -> str:
    """The per-replica and fleet table of one run (one replica: its row, without the fleet's)."""
    s = plan.summary
    one = plan.fleet.num_gpus == 1
    lines = [
        f"llmsim plan: {describe_fleet(plan.fleet)}",
        f"{s.num_requests:,} requests, {s.duration:,.1f} s simulated   (latencies in ms)",
        _HEADER,
    ]
    lines += [_replica_row(r, s.duration) for r in s.replicas]
    busy = math.fsum(r.busy_fraction for r in s.replicas) / len(s.replicas) if s.replicas else math.nan
    batch_steps = sum(r.num_steps for r in s.replicas)
    batch = math.fsum(r.mean_batch_size * r.num_steps for r in s.replicas) / batch_steps if batch_steps else 0.0
    if not one:
        lines.append(
            _row(
                "fleet",
                s.num_requests,
                s.latencies,
                s.output_tokens_per_s,
                _pct(busy),
                f"{batch:.1f}",
                s.num_preemptions,
                "",
                s.prefix_hit_rate,
            )
        )
    lines.append(
        f"throughput  {s.requests_per_s:,.2f} req/s, {s.output_tokens_per_s:,.0f} output tok/s"
        f" ({s.num_finished:,} finished, {s.num_aborted:,} aborted, {s.num_rejected:,} refused: queue full)"
    )
    if s.prefix_query_tokens:
        lines.append(
            f"prefix      {s.prefix_hit_tokens:,} of {s.prefix_query_tokens:,} prompt tokens hit the cache"
            f" (hit rate {_hit(s.prefix_hit_rate)})"
        )
    for group in plan.fleet.groups:
        p = group.params
        kv_blocks = next((r.kv_total_blocks for r in s.replicas if r.name.startswith(f"{group.name}/")), 0)
        if group.count:
            lines.append(
                f"KV cache    {group.name}: {kv_blocks + 1:,} blocks of {p.block_size} tokens per replica"
                f" ({kv_blocks:,} usable), max {p.max_num_sequences} sequences / {p.max_batch_tokens} tokens a step"
            )
    if not one:
        lines.append(f"balance     load imbalance {s.load_imbalance:.2f} (max / mean requests per replica)")
    lines.append(speed_line(s.duration, wall))
    return "\n".join(lines)


def format_comparison(plans: list[FleetPlan], wall: float) -> str:
    """One row per router, same workload and replicas."""
    first = plans[0]
    pd = any(p.fleet.disaggregated for p in plans)
    labels = [
        router_label(p.fleet) + ((" P/D" if p.fleet.disaggregated else " aggregated") if pd else "") for p in plans
    ]
    width = max(17, max(len(label) for label in labels) + 2)
    title = f"llmsim plan --compare: {describe_fleet(first.fleet)}".replace(
        f"behind {first.fleet.router.policy} ", "behind each router "
    )
    if len({p.fleet.router.dp_aware for p in plans}) > 1:
        # Rows of both kinds: "(ranks)" marks a router that sees every rank.
        title = title.replace("; the router sees replicas, vLLM's internal LB picks ranks", "")
    if pd:
        title = title.replace(f"behind a P/D router: {first.fleet.router.prefill} ", "behind each router, P/D ")
    lines = [
        title,
        f"{first.summary.num_requests:,} requests, {first.summary.duration:,.1f} s simulated   (latencies in ms)",
        f"{'router':<{width}}{'TTFT p50':>10}{'p99':>9}{'ITL p50':>9}{'p99':>8}{'TPOT p50':>10}{'E2E p99':>10}"
        f"{'queue p99':>10}{'out tok/s':>11}{'imbalance':>10}{'preempt':>9}{'refused':>9}{'prefix hit':>11}",
    ]
    for plan, label in zip(plans, labels, strict=True):
        s = plan.summary
        lat = s.latencies
        lines.append(
            f"{label:<{width}}{_ms(lat.ttft.p50):>10}{_ms(lat.ttft.p99):>9}{_ms(lat.itl.p50):>9}"
            f"{_ms(lat.itl.p99):>8}{_ms(lat.tpot.p50):>10}{_ms(lat.e2e.p99):>10}{_ms(lat.queue_time.p99):>10}"
            f"{s.output_tokens_per_s:>11,.0f}{s.load_imbalance:>10.2f}{s.num_preemptions:>9,}{s.num_rejected:>9,}"
            f"{_hit(s.prefix_hit_rate):>11}"
        )
    simulated = math.fsum(p.summary.duration for p in plans)
    lines.append(speed_line(simulated, wall))
    return "\n".join(lines)


def _slo_columns(slo: Slo, s: FleetSummary) -> str:
    return "".join(f"{_ms(t.value(s)):>14}" for t in slo.targets)


def _slo_header(slo: Slo) -> str:
    return "".join(f"{t.metric + ' ' + t.stat:>14}" for t in slo.targets)


def format_sweep(sweep: RateSweep, slo: Slo, wall: float) -> str:
    first = sweep.points[0].plan
    lines = [
        f"llmsim plan --rates: {describe_fleet(first.fleet)}",
        f"SLO: {slo} (and nothing refused)   (latencies in ms)",
        f"{'rate/s':>10}{'requests':>10}{_slo_header(slo)}{'out tok/s':>11}{'refused':>9}  meets SLO",
    ]
    for p in sweep.points:
        s = p.plan.summary
        lines.append(
            f"{p.rate:>10g}{s.num_requests:>10,}{_slo_columns(slo, s)}{s.output_tokens_per_s:>11,.0f}"
            f"{s.num_rejected:>9,}  {'yes' if p.meets_slo else 'no'}"
        )
    if sweep.best_rate is None:
        lines.append("no rate tried meets the SLO")
    else:
        lines.append(f"highest rate meeting the SLO: {sweep.best_rate:g} req/s")
    simulated = math.fsum(p.plan.summary.duration for p in sweep.points)
    lines.append(speed_line(simulated, wall))
    return "\n".join(lines)


def format_search(search: ReplicaSearch, slo: Slo, wall: float) -> str:
    first = search.tried[0][1]
    lines = [
        f"llmsim plan --replicas-for-slo: varying group '{search.group}' of {describe_fleet(first.fleet)}",
        f"SLO: {slo} (and nothing refused)   (latencies in ms)",
        f"{'replicas':>10}{_slo_header(slo)}{'out tok/s':>11}{'refused':>9}{'imbalance':>10}  meets SLO",
    ]
    for count, plan, ok in search.tried:
        s = plan.summary
        lines.append(
            f"{count:>10}{_slo_columns(slo, s)}{s.output_tokens_per_s:>11,.0f}{s.num_rejected:>9,}"
            f"{s.load_imbalance:>10.2f}  {'yes' if ok else 'no'}"
        )
    if search.best_count is None:
        lines.append(f"no count tried meets the SLO (largest tried: {search.tried[-1][0]})")
    else:
        lines.append(f"fewest replicas of '{search.group}' meeting the SLO: {search.best_count}")
    simulated = math.fsum(plan.summary.duration for _, plan, _ in search.tried)
    lines.append(speed_line(simulated, wall))
    return "\n".join(lines)


def speedup(simulated: float, wall: float) -> float:
    return simulated / wall if wall > 0 else math.inf


def compiled_core() -> bool:
    """Whether the virtual-time core runs compiled (setup.py's ``LLMSIM_COMPILE``), not from source."""
    return not str(simulation.__file__).endswith(".py")


def speed_line(simulated: float, wall: float) -> str:
    """A report's last line: how much faster than real time the run was, and on which core."""
    core = "compiled core" if compiled_core() else "pure Python core"
    return f"speed-up    {simulated:,.1f} s simulated in {wall:,.2f} s wall = {speedup(simulated, wall):,.0f}x real time ({core})"


# -- JSON -----------------------------------------------------------------------------------


def _clean(value: Any) -> Any:
    """Plain JSON values: NaN and infinities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _percentiles(p: Percentiles) -> dict[str, Any]:
    return dataclasses.asdict(p)


def _latencies(lat: Latencies) -> dict[str, Any]:
    return {name: _percentiles(getattr(lat, name)) for name in ("ttft", "itl", "tpot", "e2e", "queue_time")}


def fleet_json(fleet: FleetSpec) -> dict[str, Any]:
    r = fleet.router
    router: dict[str, Any] = {
        "policy": r.policy,
        "scrape_interval_ms": r.scrape_interval * 1000,
        "weights": dataclasses.asdict(r.weights),
        "seed": r.seed,
    }
    # Keys of data parallelism and P/D only where they apply (older readers see what they knew).
    if fleet.has_data_parallel:
        router["dp_aware"] = r.dp_aware
    if fleet.disaggregated:
        router["prefill_policy"] = r.prefill
        router["decode_policy"] = r.decode
        if r.handoff:
            router["handoff_ms"] = r.handoff * 1000
    replicas: list[dict[str, Any]] = []
    for g in fleet.groups:
        group: dict[str, Any] = {"name": g.name, "model": g.model, "count": g.count}
        if g.data_parallel > 1:
            group["data_parallel"] = g.data_parallel
        if g.kv_role is not None:
            group["kv_role"] = g.kv_role
        replicas.append(group)
    return {"router": router, "replicas": replicas}


def summary_json(s: FleetSummary) -> dict[str, Any]:
    body: dict[str, Any] = {
        "num_replicas": s.num_replicas,
        "num_requests": s.num_requests,
        "num_finished": s.num_finished,
        "num_aborted": s.num_aborted,
        "num_rejected": s.num_rejected,
        "duration": s.duration,
        "output_tokens": s.output_tokens,
        "output_tokens_per_s": s.output_tokens_per_s,
        "requests_per_s": s.requests_per_s,
        "num_preemptions": s.num_preemptions,
        "load_imbalance": s.load_imbalance,
        "prefix_hit_rate": s.prefix_hit_rate,
        "prefix_hit_tokens": s.prefix_hit_tokens,
        "prefix_query_tokens": s.prefix_query_tokens,
        **_latencies(s.latencies),
        "replicas": [
            {
                "name": r.name,
                "model": r.model,
                "num_requests": r.num_requests,
                "num_finished": r.num_finished,
                "num_aborted": r.num_aborted,
                "num_rejected": r.num_rejected,
                "output_tokens": r.output_tokens,
                **_latencies(r.latencies),
                "num_steps": r.num_steps,
                "busy_fraction": r.busy_fraction,
                "mean_batch_size": r.mean_batch_size,
                "num_preemptions": r.num_preemptions,
                "kv_total_blocks": r.kv_total_blocks,
                "kv_peak_used_blocks": r.kv_peak_used_blocks,
                "prefix_hit_rate": r.prefix_hit_rate,
            }
            for r in s.replicas
        ],
    }
    return body


def plan_json(plan: FleetPlan, wall: float) -> dict[str, Any]:
    body = {
        "fleet": fleet_json(plan.fleet),
        "summary": summary_json(plan.summary),
        "wall_seconds": wall,
        "speedup": speedup(plan.summary.duration, wall),
        "compiled_core": compiled_core(),
    }
    result: dict[str, Any] = _clean(body)
    return result


def comparison_json(plans: list[FleetPlan], wall: float) -> dict[str, Any]:
    body = {
        "fleet": fleet_json(plans[0].fleet),
        "compare": [
            {
                "router": p.fleet.router.policy,
                "dp_aware": p.fleet.router.dp_aware,
                "disaggregated": p.fleet.disaggregated,
                "summary": summary_json(p.summary),
            }
            for p in plans
        ],
        "wall_seconds": wall,
    }
    result: dict[str, Any] = _clean(body)
    return result


def _slo_json(slo: Slo) -> list[dict[str, Any]]:
    return [{"metric": t.metric, "stat": t.stat, "limit_ms": t.limit * 1000} for t in slo.targets]


def sweep_json(sweep: RateSweep, slo: Slo, wall: float) -> dict[str, Any]:
    body = {
        "fleet": fleet_json(sweep.points[0].plan.fleet),
        "slo": _slo_json(slo),
        "points": [
            {"rate": p.rate, "meets_slo": p.meets_slo, "summary": summary_json(p.plan.summary)} for p in sweep.points
        ],
        "best_rate": sweep.best_rate,
        "wall_seconds": wall,
    }
    result: dict[str, Any] = _clean(body)
    return result


def search_json(search: ReplicaSearch, slo: Slo, wall: float) -> dict[str, Any]:
    body = {
        "fleet": fleet_json(search.tried[0][1].fleet),
        "group": search.group,
        "slo": _slo_json(slo),
        "tried": [{"count": n, "meets_slo": ok, "summary": summary_json(plan.summary)} for n, plan, ok in search.tried],
        "best_count": search.best_count,
        "wall_seconds": wall,
    }
    result: dict[str, Any] = _clean(body)
    return result
