"""Running the experiments: predict every variant, write the prediction down, then measure it live.

One ``llmsim serve`` child process per experiment serves all its variants (one model each); the
client reaches it only over HTTP.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmsim.benchmark import client as load_client
from llmsim.benchmark.client import Target
from llmsim.benchmark.experiments import TOLERANCE, Experiment, Observation, Variant
from llmsim.benchmark.prediction import Prediction, predict
from llmsim.benchmark.report import clean
from llmsim.benchmark.run import RunResult, run_point
from llmsim.benchmark.server_process import serve
from llmsim.benchmark.stats import measured, summarize
from llmsim.engine.scheduler import SchedulerParams

#: How a caller turns (models.yml path, model name) into scheduler numbers (runtime.scheduler_params).
ParamsFor = Callable[[Path, str], SchedulerParams]


@dataclass(frozen=True, slots=True)
class Check:
    metric: str
    unit: str
    predicted: float
    measured: float

    @property
    def relative(self) -> float:
        if self.predicted == 0:
            return 0.0 if self.measured == 0 else math.inf
        return (self.measured - self.predicted) / abs(self.predicted)

    @property
    def ok(self) -> bool:
        return math.isfinite(self.relative) and abs(self.relative) <= TOLERANCE


@dataclass(slots=True)
class VariantResult:
    variant: str
    value: Any
    model: str
    workload: str
    predicted: dict[str, float]
    measured: dict[str, float] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    run: RunResult | None = None


@dataclass(slots=True)
class ExperimentResult:
    experiment: Experiment
    variants: list[VariantResult] = field(default_factory=list)
    ratios: list[Check] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok for v in self.variants for c in v.checks) and all(c.ok for c in self.ratios)


def observe_prediction(prediction: Prediction, warmup: float) -> Observation:
    return Observation(
        measured(prediction.records, warmup), summarize(prediction.records, warmup), prediction.num_preemptions
    )


def observe_run(run: RunResult) -> Observation:
    preemptions = run.server.get("preemptions") if run.server else None
    return Observation(
        measured(run.records, run.workload.warmup),
        run.measured,
        preemptions if isinstance(preemptions, int) else None,
    )


def _values(experiment: Experiment, o: Observation) -> dict[str, float]:
    return {m.label: m.value(o) * m.scale for m in experiment.metrics}


async def run_experiment(
    experiment: Experiment,
    params_for: ParamsFor,
    *,
    workdir: Path,
    on_prediction: Callable[[ExperimentResult], None] | None = None,
    log: Callable[[str], None] = print,
) -> ExperimentResult:
    """Predict every variant (and hand the predictions to ``on_prediction``), then run them live."""
    started = time.monotonic()
    result = ExperimentResult(experiment)
    config_path = workdir / f"{experiment.id}.models.yml"
    # JSON is YAML: the server's loader reads it as is.
    config_path.write_text(json.dumps(experiment.config(), indent=2))
    planned: list[tuple[Variant, Prediction]] = []
    for variant in experiment.variants:
        name = experiment.model_name(variant)
        workload = variant.workload()
        prediction = predict(params_for(config_path, name), workload)
        observation = observe_prediction(prediction, workload.warmup)
        result.variants.append(
            VariantResult(variant.name, variant.value, name, workload.description, _values(experiment, observation))
        )
        planned.append((variant, prediction))
    if on_prediction is not None:
        on_prediction(result)
    with serve(config_path, workdir / f"{experiment.id}.server.log") as server:
        async with load_client.session() as http:
            for (variant, prediction), vr in zip(planned, result.variants, strict=True):
                workload = variant.workload()
                log(f"{experiment.id} {variant.name}: {workload.description}")
                run = await run_point(
                    http,
                    Target(server.url, vr.model),
                    workload,
                    load=experiment.field or "workload",
                    value=variant.value if isinstance(variant.value, int | float) else None,
                    prediction=prediction,
                    reset_server=True,
                )
                vr.run = run
                vr.measured = _values(experiment, observe_run(run))
                vr.checks = [
                    Check(m.label, m.unit, vr.predicted[m.label], vr.measured[m.label]) for m in experiment.metrics
                ]
    by_name = {v.variant: v for v in result.variants}
    for ratio in experiment.ratios:
        num, den = by_name[ratio.numerator], by_name[ratio.denominator]
        result.ratios.append(
            Check(
                ratio.label,
                "x",
                num.predicted[ratio.metric] / den.predicted[ratio.metric],
                num.measured[ratio.metric] / den.measured[ratio.metric],
            )
        )
    result.seconds = time.monotonic() - started
    return result


def _check_json(c: Check) -> dict[str, Any]:
    return asdict(c) | {"relative": c.relative, "ok": c.ok}


def result_json(result: ExperimentResult) -> dict[str, Any]:
    e = result.experiment
    variants = []
    for v in result.variants:
        run = v.run
        variants.append(
            {
                "variant": v.variant,
                "value": v.value,
                "model": v.model,
                "model_config": e.model(next(x for x in e.variants if x.name == v.variant)),
                "workload": v.workload,
                "predicted": v.predicted,
                "measured": v.measured or None,
                "checks": [_check_json(c) for c in v.checks],
                "stats": {
                    "predicted": asdict(run.predicted) if run and run.predicted else None,
                    "measured": asdict(run.measured) if run else None,
                },
                "server": run.server if run else None,
                "client_loop_lateness_p99_ms": run.health.loop_lateness.p99 * 1000 if run else None,
                "client_saturated": run.health.saturated if run else None,
            }
        )
    body = {
        "id": e.id,
        "title": e.title,
        "claim": e.claim,
        "setup": dict(e.setup),
        "field": e.field,
        "tolerance": TOLERANCE,
        "ok": result.ok if result.variants and result.variants[0].checks else None,
        "seconds": result.seconds,
        "variants": variants,
        "ratios": [_check_json(c) for c in result.ratios],
    }
    out: dict[str, Any] = clean(body)
    return out


def _num(value: float) -> str:
    if math.isnan(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.3g}" if abs(value) < 10 else f"{value:,.1f}"


def markdown(results: Sequence[ExperimentResult]) -> str:
    """The table for bench/README.md: one line per metric and variant, then each experiment's ratios."""
    lines = [
        f"| experiment | variant | metric | predicted | measured | diff | within {TOLERANCE:.0%} |",
        "|---|---|---|---:|---:|---:|:---:|",
    ]
    for r in results:
        e = r.experiment
        name = f"{e.id} {e.title}"
        for v in r.variants:
            for c in v.checks:
                unit = f" ({c.unit})" if c.unit else ""
                lines.append(
                    f"| {name} | {v.variant} | {c.metric}{unit} | {_num(c.predicted)} | {_num(c.measured)} |"
                    f" {c.relative * 100:+.1f} % | {'yes' if c.ok else '**no**'} |"
                )
        for c in r.ratios:
            lines.append(
                f"| {name} | ratio | {c.metric} | {_num(c.predicted)} | {_num(c.measured)} |"
                f" {c.relative * 100:+.1f} % | {'yes' if c.ok else '**no**'} |"
            )
    return "\n".join(lines)


def format_result(result: ExperimentResult) -> str:
    e = result.experiment
    lines = [f"{e.id} {e.title}: {e.claim} ({result.seconds:.0f} s)"]
    for v in result.variants:
        for c in v.checks:
            lines.append(
                f"  {v.variant:<16}{c.metric:<42}{_num(c.predicted):>12}{_num(c.measured):>12}"
                f"{c.relative * 100:>+9.1f} %  {'ok' if c.ok else 'OUT OF TOLERANCE'}"
            )
    for c in result.ratios:
        lines.append(
            f"  {'ratio':<16}{c.metric:<42}{_num(c.predicted):>12}{_num(c.measured):>12}"
            f"{c.relative * 100:>+9.1f} %  {'ok' if c.ok else 'OUT OF TOLERANCE'}"
        )
    return "\n".join(lines)


def default_workdir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="llmsim-experiments-")
