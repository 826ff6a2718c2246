"""``llmsim check``: parse and wire the config and responses without serving (for CI and operators).

Prints each model's engine and KV capacity, and for a scheduler model the timing knobs it runs
with, each with where it came from: the file, the built-in calibration data (a published vLLM
sweep, or the nearest calibrated GPU or model, as ``llmsim/data/calibrated_timing.yml`` derives
it), or the schema's default.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from llmsim.config import ModelConfig
from llmsim.config.calibrated_timing import TIMING_KNOBS, dataset_sources
from llmsim.errors import ConfigError
from llmsim.runtime import build_runtime

# Data sets a source names: the one it was fitted to, and one whose value it holds.
_CITED = re.compile(r"calibration data (\S+) \(|held at (\S+)'s value")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("check", help="validate models.yml and responses.yml, then exit")
    p.add_argument("--config", default=os.environ.get("LLMSIM_CONFIG"))
    p.add_argument("--responses", default=os.environ.get("LLMSIM_RESPONSES"))
    p.set_defaults(func=run)


def knob_value(model: ModelConfig, knob: str) -> float:
    """The effective value of a timing knob (``section.field``) of a parsed model."""
    section, field = knob.split(".")
    if section == "efficiency":
        value: float = getattr(model.efficiency, field)
        return value
    return float(getattr(model.latency, field)) if model.latency is not None else 0.0


def run(args: argparse.Namespace) -> int:
    try:
        runtime = build_runtime(args.config, args.responses)
    except ConfigError as exc:
        print(f"llmsim: config error: {exc}", file=sys.stderr)
        return 2
    config = runtime.config
    cited: set[str] = set()
    for name, served in runtime.state.models.items():
        print(f"{name}: {served.info}")
        sources = config.timing_sources(name)
        if not sources:
            continue
        print("  timing (value: source)")
        for knob in TIMING_KNOBS:
            source = sources[knob]
            for match in _CITED.findall(source):
                cited.update(name for name in match if name)
            print(f"    {knob:<38}{knob_value(config.model(name), knob):>9.4g}: {source}")
    if cited:
        print("calibration data:")
        for dataset, source in dataset_sources().items():
            if dataset in cited:
                print(f"  {dataset}: {source}")
    return 0
