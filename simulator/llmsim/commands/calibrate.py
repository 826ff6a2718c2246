"""``llmsim calibrate``: fit a model's timing knobs to measurements of a real vLLM deployment.

    llmsim calibrate (--model M [--config models.yml] | --profile P --hardware H) FILE... [--out calibrated.yml]

FILEs are ``vllm bench serve --save-result`` JSON files (one load point each) or CSV tables (see
``llmsim.calibration.measurement``). Prints the knobs and a measured-versus-fitted table, and
writes a models.yml with the fitted model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmsim.config import ModelConfig, ModelsConfig, load_models_config
from llmsim.config.loader import EMBEDDED_MODELS, parse_models_config
from llmsim.errors import ConfigError
from llmsim.runtime import scheduler_params

if TYPE_CHECKING:
    from llmsim.calibration import Calibration

# The calibration package needs scipy, an optional dependency the server image leaves out: it is
# imported when the command runs, never when the CLI starts.
METRICS = ("ttft", "itl", "tpot")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("calibrate", help="fit a model's timing knobs to vllm bench serve measurements")
    p.add_argument("measurements", nargs="+", type=Path, help="vllm bench serve result JSON files or CSV tables")
    p.add_argument("--config", default=os.environ.get("LLMSIM_CONFIG"), help="models.yml (default: embedded)")
    p.add_argument("--model", help="the model of --config that ran (its scheduler limits are used as they are)")
    p.add_argument("--profile", help="a built-in model profile (instead of --model), with --hardware")
    p.add_argument("--hardware", help="a GPU profile (with --profile)")
    p.add_argument(
        "--metrics",
        default=",".join(METRICS),
        help="p50 latencies to fit, of ttft,itl,tpot (default: all measured; every one is reported)",
    )
    p.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="hold a knob, e.g. latency.step_overhead_ms=1.5 or efficiency.compute=0.6; repeatable",
    )
    p.add_argument("--name", help="name of the fitted model (default: the model's, or the profile's)")
    p.add_argument("--out", type=Path, default=Path("calibrated.yml"), help="models.yml to write (calibrated.yml)")
    p.add_argument("--json", type=Path, dest="json_path", help="also write the fit as JSON to this file")
    p.set_defaults(func=run)


def _base_model(args: argparse.Namespace) -> tuple[ModelsConfig, ModelConfig, str]:
    if (args.model is None) == (args.profile is None):
        raise ValueError("give --model (of --config), or --profile with --hardware")
    if args.profile is not None:
        if args.hardware is None:
            raise ValueError("--profile needs --hardware")
        name = args.name or args.profile
        text = f"models:\n  - {{name: {json.dumps(name)}, engine: scheduler, profile: {json.dumps(args.profile)}, hardware: {json.dumps(args.hardware)}}}\n"
        config = parse_models_config(text, "--profile/--hardware")
        return config, config.model(name), "--profile/--hardware"
    config = load_models_config(args.config)
    file = str(args.config) if args.config else EMBEDDED_MODELS
    names = [m.name for m in config.models]
    if args.model not in names:
        raise ConfigError(file, f"no model named '{args.model}' (models: {', '.join(names)})")
    if config.model(args.model).engine != "scheduler":
        raise ConfigError(file, f"model '{args.model}' does not use engine 'scheduler'")
    return config, config.model(args.model), file


def _fixed(texts: list[str]) -> dict[str, float]:
    fixed: dict[str, float] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        try:
            if not sep:
                raise ValueError
            fixed[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--fix: expected KNOB=VALUE, got '{text}'") from None
    return fixed


def run(args: argparse.Namespace) -> int:
    try:
        from llmsim.calibration import Measurement, calibrate, fitted_model, load_measurements, models_yaml
    except ImportError as exc:
        print(f"llmsim calibrate: needs scipy ({exc}): pip install 'llmsim[calibrate]'", file=sys.stderr)
        return 2
    try:
        config, base, file = _base_model(args)
        params = scheduler_params(config, base.name, file)
        points: list[Measurement] = []
        for path in args.measurements:
            points += load_measurements(path)
        metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
        result = calibrate(params, points, metrics=metrics, fixed=_fixed(args.fix))
    except (ConfigError, ValueError) as exc:
        print(f"llmsim calibrate: {exc}", file=sys.stderr)
        return 2
    name = args.name or base.name
    print(format_calibration(name, base, result))
    entry = fitted_model(base, result, name)
    args.out.write_text(models_yaml(entry, result, [str(p) for p in args.measurements]))
    print(f"wrote {args.out}")
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(calibration_json(name, result, entry), indent=2) + "\n")
    return 0


def format_calibration(name: str, base: ModelConfig, c: Calibration) -> str:
    fitted = sum(p.measurement.fit for p in c.points)
    lines = [
        f"llmsim calibrate: {name} ({base.profile or 'custom model'} on {base.hardware}), {len(c.points)} points"
        f" ({fitted} fitted) on p50 {', '.join(m.upper() for m in c.metrics)}, {c.evaluations} replays",
        f"{'knob':<38}{'start':>9}{'fitted':>10}",
    ]
    lines += [f"{k.name:<38}{k.start:>9.4g}{k.value:>10.4g}   {k.status}" for k in c.knobs]
    lines.append(
        f"{'point':<36}{'load':>14}{'prompt':>8}{'output':>8}{'metric':>8}{'measured':>10}{'fitted':>9}{'error':>9}   (ms)"
    )
    for point in c.points:
        m = point.measurement
        first = True
        for metric in METRICS:
            measured = m.measured(metric)
            error = point.error(metric)
            if measured is None or error is None:
                continue
            used = m.fits(metric) and metric in c.metrics
            lead = f"{m.label:<36}{m.load:>14}{m.prompt_tokens:>8.0f}{m.output_tokens:>8.0f}" if first else " " * 66
            note = "" if used else "  not fitted" + (f": {m.note}" if m.note else "")
            lines.append(
                f"{lead}{metric.upper():>8}{measured * 1000:>10.2f}{point.prediction.value(metric) * 1000:>9.2f}"
                f"{error:>+9.1%}{note}"
            )
            first = False
    lines.append(f"RMS relative error of the fitted values: {c.rms_error:.2%}")
    return "\n".join(lines)


def calibration_json(name: str, c: Calibration, entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": name,
        "metrics": list(c.metrics),
        "knobs": [{"name": k.name, "start": k.start, "value": k.value, "status": k.status} for k in c.knobs],
        "rms_error": c.rms_error,
        "evaluations": c.evaluations,
        "points": [
            {
                "label": p.measurement.label,
                "concurrency": p.measurement.concurrency,
                "rate": p.measurement.rate,
                "num_requests": p.measurement.num_requests,
                "prompt_tokens": p.measurement.prompt_tokens,
                "output_tokens": p.measurement.output_tokens,
                "fit": p.measurement.fit,
                "fit_metrics": list(p.measurement.fit_metrics),
                "note": p.measurement.note,
                "measured": {m: p.measurement.measured(m) for m in METRICS},
                "fitted": {m: p.prediction.value(m) for m in METRICS},
                "error": {m: p.error(m) for m in METRICS},
            }
            for p in c.points
        ],
        "model_entry": entry,
    }
