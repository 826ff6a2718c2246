"""``llmsim check``: parse and wire the config and responses without serving (for CI and operators).

Prints each model's engine and KV capacity, and for a scheduler model the timing knobs it runs
with, each with where it came from: the file, the built-in calibration data (a published vLLM
sweep, or the nearest calibrated GPU or model, as ``llmsim/data/calibrated_timing.yml`` derives
it), or the schema's default. ``--json`` prints the same as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from typing import Any, Protocol

from llmsim.config import ModelConfig, ModelsConfig
from llmsim.config.calibrated_timing import TIMING_KNOBS, dataset_sources
from llmsim.config.loader import EMBEDDED_MODELS
from llmsim.errors import ConfigError
from llmsim.runtime import build_runtime, external_ports, load_config

# Data sets a source names: the one it was fitted to, and one whose value it holds.
_CITED = re.compile(r"calibration data (\S+) \(|held at (\S+)'s value")


class EngineFacts(Protocol):
    """What a served model says about its engine (``/v1/models``' ``llmsim`` key)."""

    @property
    def engine(self) -> str: ...
    @property
    def hardware(self) -> str | None: ...
    @property
    def kv_cache_blocks(self) -> int | None: ...
    @property
    def block_size(self) -> int | None: ...
    @property
    def max_num_sequences(self) -> int | None: ...
    @property
    def max_batch_tokens(self) -> int | None: ...


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "check",
        help="validate models.yml and responses.yml, print each model's capacity and timing, then exit",
        description="Validate models.yml and responses.yml as `llmsim serve` would, without binding a port; "
        "print each model's engine, KV-cache capacity and batch limits, and its timing knobs with where each "
        "came from. Exit 2 on a config error.",
    )
    p.add_argument("--config", default=os.environ.get("LLMSIM_CONFIG"), help="models.yml (default: embedded)")
    p.add_argument("--responses", default=os.environ.get("LLMSIM_RESPONSES"), help="responses.yml")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.set_defaults(func=run)


def knob_value(model: ModelConfig, knob: str) -> float:
    """The effective value of a timing knob (``section.field``) of a parsed model."""
    section, field = knob.split(".")
    if section == "efficiency":
        value: float = getattr(model.efficiency, field)
        return value
    return float(getattr(model.latency, field)) if model.latency is not None else 0.0


def describe_engine(info: EngineFacts, tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1) -> list[str]:
    """A model's engine and capacity as lines a person reads (the first goes after the model's name)."""
    if info.engine != "scheduler":
        return [f"{info.engine} engine"]
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    if pp > 1:
        gpus = f"{pp} stages of {tp} x {info.hardware} (pipeline parallel)"
    else:
        gpus = f"{tp} x {info.hardware} (tensor parallel)" if tp > 1 else f"{info.hardware}"
    lines = [f"scheduler engine on {gpus}"]
    if info.kv_cache_blocks is not None and info.block_size is not None:
        tokens = info.kv_cache_blocks * info.block_size
        # vLLM's num_gpu_blocks: every rank holds these blocks, each with its share of the KV heads
        # (and of the layers: its stage's).
        each = " on every GPU" if tp * pp > 1 else ""
        lines.append(
            f"  KV cache   {info.kv_cache_blocks:,} blocks of {info.block_size} tokens ({tokens:,} tokens){each}"
        )
    if info.max_num_sequences is not None and info.max_batch_tokens is not None:
        lines.append(
            f"  batch      up to {info.max_num_sequences:,} sequences, {info.max_batch_tokens:,} tokens per step"
        )
    return lines


def _cited(sources: dict[str, str]) -> set[str]:
    cited: set[str] = set()
    for source in sources.values():
        for match in _CITED.findall(source):
            cited.update(name for name in match if name)
    return cited


def report(config: ModelsConfig, infos: Mapping[str, EngineFacts]) -> dict[str, Any]:
    """The check's findings as plain data: what ``--json`` prints and the text is written from."""
    models: dict[str, Any] = {}
    cited: set[str] = set()
    for name, info in infos.items():
        sources = config.timing_sources(name)
        cited |= _cited(sources)
        models[name] = {
            "engine": info.engine,
            "hardware": info.hardware,
            "tensor_parallel_size": config.model(name).tensor_parallel_size,
            "pipeline_parallel_size": config.model(name).pipeline_parallel_size,
            "kv_cache_blocks": info.kv_cache_blocks,
            "block_size": info.block_size,
            "kv_cache_tokens": (
                info.kv_cache_blocks * info.block_size
                if info.kv_cache_blocks is not None and info.block_size is not None
                else None
            ),
            "max_num_sequences": info.max_num_sequences,
            "max_batch_tokens": info.max_batch_tokens,
            "timing": {
                knob: {"value": knob_value(config.model(name), knob), "source": sources[knob]} for knob in sources
            },
        }
    data = {name: source for name, source in dataset_sources().items() if name in cited}
    return {"models": models, "calibration_data": data}


def run(args: argparse.Namespace) -> int:
    try:
        loaded = load_config(args.config)
        # A server per rank (external load balancing in one process): every rank alike, check the first.
        first_rank = 0 if external_ports(*loaded) > 1 else None
        runtime = build_runtime(args.config, args.responses, checked_config=loaded, dp_rank=first_rank)
    except ConfigError as exc:
        print(f"llmsim: config error: {exc}", file=sys.stderr)
        return 2
    infos = {name: served.info for name, served in runtime.state.models.items()}
    body = report(runtime.config, infos)
    if args.json:
        print(json.dumps(body, indent=2))
        return 0
    print(f"models.yml: {args.config or EMBEDDED_MODELS}: {len(infos)} model(s), OK")
    for name, info in infos.items():
        model = runtime.config.model(name)
        first, *rest = describe_engine(info, model.tensor_parallel_size, model.pipeline_parallel_size)
        print(f"{name}: {first}")
        for line in rest:
            print(line)
        timing = body["models"][name]["timing"]
        if not timing:
            continue
        print("  timing (value: source)")
        for knob in TIMING_KNOBS:
            print(f"    {knob:<38}{timing[knob]['value']:>9.4g}: {timing[knob]['source']}")
    if body["calibration_data"]:
        print("calibration data:")
        for dataset, source in body["calibration_data"].items():
            print(f"  {dataset}: {source}")
    return 0
