"""A calibration as a models.yml model entry, with the evidence in comments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from llmsim.calibration.fit import Calibration
from llmsim.calibration.measurement import METRICS
from llmsim.config import ModelConfig


def fitted_model(base: ModelConfig, calibration: Calibration, name: str) -> dict[str, Any]:
    """``base`` (profile already merged: every field explicit) with the fitted knobs."""
    entry: dict[str, Any] = base.model_dump(mode="json", exclude_none=True)
    entry["name"] = name
    knobs = {k.name: k.value for k in calibration.knobs}
    latency = dict(entry.get("latency") or {})
    latency["step_overhead_ms"] = round(knobs["latency.step_overhead_ms"], 4)
    latency["step_overhead_per_sequence_ms"] = round(knobs["latency.step_overhead_per_sequence_ms"], 4)
    latency["request_overhead_ms"] = round(knobs["latency.request_overhead_ms"], 4)
    entry["latency"] = latency
    entry["efficiency"] = {
        "compute": round(knobs["efficiency.compute"], 4),
        "memory": round(knobs["efficiency.memory"], 4),
    }
    return entry


def _comment_table(calibration: Calibration) -> list[str]:
    lines = [f"{'point':<40}{'metric':>7}{'measured ms':>13}{'fitted ms':>11}{'error':>9}"]
    for point in calibration.points:
        m = point.measurement
        for metric in METRICS:
            measured = m.measured(metric)
            error = point.error(metric)
            if measured is None or error is None:
                continue
            used = m.fits(metric) and metric in calibration.metrics
            lines.append(
                f"{m.label + ' ' + m.load:<40}{metric.upper():>7}{measured * 1000:>13.2f}"
                f"{point.prediction.value(metric) * 1000:>11.2f}{error:>+9.1%}{'' if used else '  (not fitted)'}"
            )
    return lines


def models_yaml(entry: dict[str, Any], calibration: Calibration, sources: Sequence[str]) -> str:
    """A models.yml holding the fitted model, headed by the fit's knobs and per-point errors."""
    header = [
        f"Fitted by `llmsim calibrate` to {len(calibration.points)} points from: {', '.join(sources)}",
        f"fitted on p50 {', '.join(m.upper() for m in calibration.metrics)};"
        f" RMS relative error of the fitted values {calibration.rms_error:.2%}",
    ]
    header += [f"{k.name} = {k.value:.4g} ({k.status})" for k in calibration.knobs]
    header += _comment_table(calibration)
    body = yaml.safe_dump({"version": 1, "models": [entry]}, sort_keys=False, default_flow_style=False)
    return "".join(f"# {line}".rstrip() + "\n" for line in header) + body
