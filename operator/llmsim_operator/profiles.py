"""llmsim's built-in GPU and model profiles, read from the data files it ships (never imported as code).

The operator needs them to resolve profile names and compute ``status.kvCacheBlocks``; reading the
same files the simulator reads keeps one copy of the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml


@dataclass(frozen=True, slots=True)
class Hardware:
    hbm_gib: float
    memory_bandwidth_gbps: float
    peak_tflops: float


@dataclass(frozen=True, slots=True)
class ModelProfile:
    context_length: int | None
    parameters_billions: float | None
    bytes_per_parameter: float | None
    kv_bytes_per_token: int | None


def _data_file(name: str) -> Any:
    text = resources.files("llmsim").joinpath("data", name).read_text(encoding="utf-8")
    return yaml.safe_load(text)


@cache
def builtin_hardware() -> dict[str, Hardware]:
    raw: dict[str, dict[str, Any]] = _data_file("hardware.yml")
    return {
        name: Hardware(
            hbm_gib=float(spec["hbm_gib"]),
            memory_bandwidth_gbps=float(spec["memory_bandwidth_gbps"]),
            peak_tflops=float(spec["peak_tflops"]),
        )
        for name, spec in raw.items()
    }


@cache
def builtin_models() -> dict[str, ModelProfile]:
    raw: dict[str, dict[str, Any]] = _data_file("model_profiles.yml")
    out: dict[str, ModelProfile] = {}
    for name, spec in raw.items():
        weights = spec.get("weights") or {}
        kv = spec.get("kv_cache") or {}
        out[name] = ModelProfile(
            context_length=spec.get("context_length"),
            parameters_billions=weights.get("parameters_billions"),
            bytes_per_parameter=weights.get("bytes_per_parameter"),
            kv_bytes_per_token=kv.get("bytes_per_token"),
        )
    return out
