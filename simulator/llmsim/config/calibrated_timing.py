"""The built-in timing table: the scheduler engine's knobs for a built-in model profile on a built-in GPU.

``data/calibrated_timing.yml`` holds, per GPU and model profile, every knob of the cost model as
``llmsim calibrate`` fitted it to a published vLLM sweep (``hack/calibrate_profiles.py`` writes it
from ``tests/calibration/data/sweeps.yml``). A pair nobody measured is derived and says so:

- a GPU without a sweep takes the knobs of the calibrated GPU the table names for it (``gpus``);
- a model without a sweep on that GPU takes those of the calibrated model nearest to it in weight
  bytes (a decode step is mostly the read of the weights, so that is what the knobs scale).

The loader merges these under a models.yml entry as it merges the model profile: a field the
file sets wins. :func:`timing_defaults` answers for one pair, each knob with where it came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from llmsim.errors import parse_yaml

#: The knobs, as models.yml names them (section.field).
TIMING_KNOBS = (
    "efficiency.compute",
    "efficiency.memory",
    "latency.step_overhead_ms",
    "latency.step_overhead_per_sequence_ms",
    "latency.request_overhead_ms",
)
TABLE_FILE = "<embedded>/calibrated_timing.yml"


@dataclass(frozen=True, slots=True)
class KnobDefault:
    """One knob's built-in value and where it came from (what ``llmsim check`` prints)."""

    value: float
    source: str


@cache
def _table() -> dict[str, Any]:
    text = resources.files("llmsim").joinpath("data", "calibrated_timing.yml").read_text(encoding="utf-8")
    table: dict[str, Any] = parse_yaml(text, TABLE_FILE)
    return table


def calibrated_gpus() -> dict[str, str | None]:
    """Every GPU the table covers: None for a calibrated one, else the calibrated GPU it derives from."""
    return {gpu: None if how == "calibrated" else str(how["from"]) for gpu, how in _table()["gpus"].items()}


def _dataset(name: str) -> str:
    d = _table()["datasets"][name]
    return f"calibration data {name} ({d['profile']} on {d['hardware']}, vLLM {d['vllm']})"


def _nearest(profile: str, candidates: list[str], weight_bytes: dict[str, float]) -> str:
    """The candidate whose weights are nearest in size to ``profile``'s (by ratio; ties: by name)."""
    own = weight_bytes[profile]
    return min(sorted(candidates), key=lambda c: abs(math.log(weight_bytes[c] / own)))


def timing_defaults(profile: str, hardware: str, weight_bytes: dict[str, float]) -> dict[str, KnobDefault] | None:
    """The built-in knobs of ``profile`` on ``hardware``, or None when the table covers no such GPU.

    ``weight_bytes`` maps every built-in model profile to its weight bytes (the nearest-model rule).
    """
    table = _table()
    how = table["gpus"].get(hardware)
    if how is None or profile not in weight_bytes:
        return None
    derivation = []
    gpu = hardware
    if how != "calibrated":
        gpu = str(how["from"])
        derivation.append(f"{hardware} takes {gpu}'s knobs: {how['why']}")
    models: dict[str, Any] = table["pairs"][gpu]
    model = profile
    if profile not in models:
        model = _nearest(profile, [m for m in models if m in weight_bytes], weight_bytes)
        derivation.append(f"{model} is the calibrated model nearest to {profile} in weight bytes")
    entry = models[model]
    held: dict[str, str] = entry.get("held") or {}
    prefix = f"derived from {model} on {gpu} ({'; '.join(derivation)}): " if derivation else ""
    out = {}
    for knob in TIMING_KNOBS:
        source = prefix + _dataset(entry["data"])
        if knob in held:
            source += f", {held[knob]}"
        out[knob] = KnobDefault(float(entry[knob]), source)
    return out


def dataset_sources() -> dict[str, str]:
    """Each data set of the table and where its numbers were published."""
    return {name: f"{d['source']} (data: {d['data']}; fit: {d['fit']})" for name, d in _table()["datasets"].items()}
