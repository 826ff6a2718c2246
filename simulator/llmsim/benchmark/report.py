"""Predicted, measured and the server's view in one table, and the same as JSON."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from llmsim.benchmark.monitor import SATURATED_P99_S, ClientHealth
from llmsim.benchmark.run import RunResult
from llmsim.benchmark.stats import Distribution, LoadStats

_PERCENTILES = ("p50", "p90", "p99", "max")


@dataclass(frozen=True, slots=True)
class Row:
    """One metric three ways; latencies in ms."""

    metric: str
    unit: str
    predicted: float | None
    measured: float
    server: float | None

    @property
    def diff(self) -> float | None:
        return None if self.predicted is None else self.measured - self.predicted

    @property
    def relative(self) -> float | None:
        if self.predicted is None or self.predicted == 0 or math.isnan(self.predicted):
            return None
        return (self.measured - self.predicted) / abs(self.predicted)


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def _server_ms(server: dict[str, Any] | None, name: str, q: str) -> float | None:
    if server is None:
        return None
    value = server.get(name, {}).get(q)
    return value * 1000 if isinstance(value, int | float) else None


def rows(result: RunResult) -> list[Row]:
    """The comparison table of one run."""
    m, p, server = result.measured, result.predicted, result.server
    out: list[Row] = []
    latencies: list[tuple[str, Callable[[LoadStats], Distribution], str | None, tuple[str, ...]]] = [
        ("TTFT", lambda s: s.ttft, "ttft", _PERCENTILES),
        ("ITL", lambda s: s.itl, "itl", _PERCENTILES),
        ("TPOT", lambda s: s.tpot, None, _PERCENTILES[:3]),
        ("E2E", lambda s: s.e2e, "e2e", _PERCENTILES),
    ]
    for label, pick, server_name, qs in latencies:
        for q in qs:
            out.append(
                Row(
                    f"{label} {q}",
                    "ms",
                    _ms(getattr(pick(p), q)) if p is not None else None,
                    getattr(pick(m), q) * 1000,
                    _server_ms(server, server_name, q) if server_name else None,
                )
            )
    requests = server.get("requests", {}).get("total") if server else None
    out += [
        Row("requests/s", "req/s", p.request_rate if p else None, m.request_rate, None),
        Row("output tokens/s", "tok/s", p.output_token_rate if p else None, m.output_token_rate, None),
        Row("requests completed", "", p.completed if p else None, m.completed, requests),
        Row(
            "output tokens",
            "",
            p.output_tokens if p else None,
            m.output_tokens,
            server.get("generation_tokens") if server else None,
        ),
    ]
    if result.prediction is not None or server is not None:
        out.append(
            Row(
                "preemptions",
                "",
                result.prediction.num_preemptions if result.prediction else None,
                math.nan,
                server.get("preemptions") if server else None,
            )
        )
    return out


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
    return f"{value:,.2f}"


def _signed(value: float | None, percent: bool = False) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value * 100:+.1f}%" if percent else f"{value:+,.2f}"


def format_table(table: Sequence[Row]) -> str:
    lines = [f"{'metric':<22}{'predicted':>12}{'measured':>12}{'server':>12}{'diff':>12}{'diff %':>9}"]
    for r in table:
        name = f"{r.metric} ({r.unit})" if r.unit else r.metric
        lines.append(
            f"{name:<22}{_fmt(r.predicted):>12}{_fmt(r.measured):>12}{_fmt(r.server):>12}"
            f"{_signed(r.diff):>12}{_signed(r.relative, True):>9}"
        )
    return "\n".join(lines)


def format_health(health: ClientHealth) -> str:
    lat = health.loop_lateness
    line = (
        f"client: event-loop lateness p50 {lat.p50 * 1000:.2f} / p99 {lat.p99 * 1000:.2f} / max {lat.max * 1000:.1f} ms,"
        f" CPU {health.cpu_seconds:.1f} s ({health.cpu_share:.0%} of a core)"
    )
    if health.saturated:
        line += (
            f"\nWARNING: the client's event loop ran late (p99 > {SATURATED_P99_S * 1000:.0f} ms): the client, not the"
            " server, inflated these latencies; use fewer streams per client or more client processes"
        )
    return line


def format_result(result: RunResult) -> str:
    m = result.measured
    head = f"== {result.load} {_fmt(result.value)}: {result.workload.description}; {m.requests} measured requests" + (
        f" (warm-up {result.workload.warmup:g} s excluded)" if result.workload.warmup else ""
    )
    errors = ", ".join(f"{k}: {v}" for k, v in m.errors.items()) or "none"
    extra = [
        f"from the actual send: TTFT p50 {m.ttft_sent.p50 * 1000:.1f} / p99 {m.ttft_sent.p99 * 1000:.1f} ms,"
        f" E2E p50 {m.e2e_sent.p50 * 1000:.1f} / p99 {m.e2e_sent.p99 * 1000:.1f} ms;"
        f" send delay p50 {m.send_delay.p50 * 1000:.2f} / p99 {m.send_delay.p99 * 1000:.2f}"
        f" / max {m.send_delay.max * 1000:.1f} ms",
        f"errors: {errors}; aborted by the client: {m.aborted}; prompt lengths differing from usage: {m.prompt_mismatches}",
        format_health(result.health),
    ]
    if result.prediction is not None:
        extra.append(
            f"prediction: {result.prediction.num_steps:,} simulated steps, {result.prediction.passes} pass(es)"
        )
    return "\n".join([head, format_table(rows(result)), *extra])


def format_sweep(results: Sequence[RunResult]) -> str:
    """One line per load point: what was achieved and the headline latencies, predicted / measured."""

    def pair(p: LoadStats | None, m: LoadStats, pick: Callable[[LoadStats], float]) -> str:
        measured = f"{pick(m) * 1000:,.1f}"
        return f"{pick(p) * 1000:,.1f} / {measured}" if p is not None else measured

    lines = [
        f"{'load':>12}{'req/s':>10}{'tok/s':>10}{'TTFT p50 ms':>20}{'TTFT p99 ms':>20}{'ITL p50 ms':>18}{'E2E p50 ms':>20}{'errors':>8}"
    ]
    for r in results:
        m, p = r.measured, r.predicted
        lines.append(
            f"{r.load + ' ' + _fmt(r.value):>12}{m.request_rate:>10.2f}{m.output_token_rate:>10,.0f}"
            f"{pair(p, m, lambda s: s.ttft.p50):>20}{pair(p, m, lambda s: s.ttft.p99):>20}"
            f"{pair(p, m, lambda s: s.itl.p50):>18}{pair(p, m, lambda s: s.e2e.p50):>20}{sum(m.errors.values()):>8}"
        )
    if any(r.predicted is not None for r in results):
        lines.append("(predicted / measured)")
    return "\n".join(lines)


def clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def result_json(result: RunResult) -> dict[str, Any]:
    health = result.health
    out: dict[str, Any] = clean(
        {
            "load": result.load,
            "value": result.value,
            "workload": result.workload.description,
            "warmup_s": result.workload.warmup,
            "measured": asdict(result.measured),
            "predicted": asdict(result.predicted) if result.predicted is not None else None,
            "prediction": {
                "preemptions": result.prediction.num_preemptions,
                "steps": result.prediction.num_steps,
                "passes": result.prediction.passes,
            }
            if result.prediction is not None
            else None,
            "server": result.server,
            "client": {
                "loop_lateness": asdict(health.loop_lateness),
                "cpu_seconds": health.cpu_seconds,
                "wall_seconds": health.wall_seconds,
                "saturated": health.saturated,
            },
            "comparison": [asdict(r) | {"diff": r.diff, "relative": r.relative} for r in rows(result)],
        }
    )
    return out
