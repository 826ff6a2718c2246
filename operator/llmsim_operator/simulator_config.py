"""The simulator's own files: one models.yml entry per LLMSimulator, plus responses.yml, and their hash.

The format is llmsim's models.yml (``llmsim/config/schema.py``); this module writes it without
importing llmsim, and a test parses the result with llmsim's loader.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from llmsim_operator.conventions import (
    KV_EVENTS_PORT,
    KV_EVENTS_TOPIC,
    MODELS_KEY,
    RESPONSES_KEY,
    TOKENIZER_DIR,
    TOKENIZER_FILE,
)
from llmsim_operator.crd import FAULT_RATES
from llmsim_operator.spec import SimulatorSpec

# camelCase spec key -> models.yml key, per section.
_WEIGHTS = {"parametersBillions": "parameters_billions", "bytesPerParameter": "bytes_per_parameter"}
_KV_CACHE = {
    "kvBytesPerToken": "bytes_per_token",
    "blockSize": "block_size",
    "gpuMemoryUtilization": "gpu_memory_utilization",
    "watermark": "watermark",
    "enablePrefixCaching": "enable_prefix_caching",
}
_SCHEDULER = {
    "maxBatchTokens": "max_batch_tokens",
    "maxNumSequences": "max_num_sequences",
    "maxWaitingRequests": "max_waiting_requests",
    "asyncScheduling": "async_scheduling",
}
_LORA = {"maxLoras": "max_loras", "maxCpuLoras": "max_cpu_loras", "loadMs": "load_ms"}
_LATENCY = {
    "stepOverheadMs": "step_overhead_ms",
    "stepOverheadPerSequenceMs": "step_overhead_per_sequence_ms",
    "requestOverheadMs": "request_overhead_ms",
    "ttftOverheadMs": "ttft_overhead_ms",
    "prefillTokensPerSecond": "prefill_tokens_per_second",
    "itlMs": "itl_ms",
}
_EFFICIENCY = {"compute": "compute", "memory": "memory"}
_FAULTS = {"seed": "seed", "stallMs": "stall_ms", "slowFactor": "slow_factor", "headerOverride": "header_override"}


def _pick(source: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    return {snake: source[camel] for camel, snake in mapping.items() if camel in source}


def models_document(sim: SimulatorSpec) -> dict[str, Any]:
    """models.yml as a Python structure."""
    model = sim.model
    entry: dict[str, Any] = {"name": model["name"], "engine": sim.engine}
    if "profile" in model:
        entry["profile"] = model["profile"]
    entry["hardware"] = sim.hardware_name
    if "contextLength" in model:
        entry["context_length"] = model["contextLength"]
    # Weights and KV cache only when their size is known: llmsim requires it once the section exists.
    if "profile" in model or "parametersBillions" in model:
        weights = _pick(model, _WEIGHTS)
        if weights:
            entry["weights"] = weights
    if sim.kv_cache_blocks is not None:
        entry["kv_cache"] = _pick({**sim.section("scheduler"), **model}, _KV_CACHE)
    for key, section, mapping in (
        ("scheduler", "scheduler", _SCHEDULER),
        ("latency", "latency", _LATENCY),
        ("efficiency", "efficiency", _EFFICIENCY),
    ):
        values = _pick(sim.section(section), mapping)
        if values:
            entry[key] = values
    if sim.spec.get("legacyMetrics"):
        entry["legacy_metrics"] = True
    faults = _faults(sim.section("faults"))
    if faults:
        entry["faults"] = faults
    if "enablePromptTokensDetails" in sim.spec:
        entry["enable_prompt_tokens_details"] = bool(sim.spec["enablePromptTokensDetails"])
    entry.update(_routing(sim))
    doc: dict[str, Any] = {"version": 1}
    if "startupSeconds" in sim.spec:
        doc["startup_seconds"] = sim.spec["startupSeconds"]
    if sim.custom_hardware:
        hw = sim.hardware
        doc["hardware"] = {
            sim.hardware_name: {
                "hbm_gib": hw.hbm_gib,
                "memory_bandwidth_gbps": hw.memory_bandwidth_gbps,
                "peak_tflops": hw.peak_tflops,
            }
        }
    doc["models"] = [entry]
    return doc


def _faults(spec: dict[str, Any]) -> dict[str, Any]:
    """models.yml's ``faults`` from ``spec.faults`` (empty: no section, no faults)."""
    faults = _pick(spec, _FAULTS)
    rates = _pick(spec.get("rates") or {}, FAULT_RATES)
    if rates:
        faults["rates"] = rates
    # headerOverride defaults to false in the CRD: alone, it says nothing models.yml would not.
    if faults == {"header_override": False}:
        return {}
    return faults


def _routing(sim: SimulatorSpec) -> dict[str, Any]:
    """models.yml's lora, kv_events and tokenizer sections, from spec.lora, spec.kvEvents, spec.tokenizer."""
    out: dict[str, Any] = {}
    lora = sim.section("lora")
    if lora:
        section = _pick(lora, _LORA)
        section["adapters"] = [{"name": a["name"], "path": a.get("path", "")} for a in lora.get("adapters", [])]
        out["lora"] = section
    events = sim.section("kvEvents")
    if events.get("enabled"):
        # Bound on every interface: llm-d's indexer dials tcp://<pod-ip>:<port> (pod discovery).
        out["kv_events"] = {
            "enable_kv_cache_events": True,
            "endpoint": f"tcp://*:{kv_events_port(sim)}",
            "topic": events.get("topic", KV_EVENTS_TOPIC),
            "event_format": events.get("eventFormat", "map"),
        }
    tokenizer = sim.section("tokenizer")
    if tokenizer:
        out["tokenizer"] = {"path": f"{TOKENIZER_DIR}/{TOKENIZER_FILE}"}
        if "chatTemplate" in tokenizer:
            out["tokenizer"]["chat_template"] = tokenizer["chatTemplate"]
    return out


def kv_events_port(sim: SimulatorSpec) -> int | None:
    """The container port of the KV-events PUB socket, None when events are off."""
    events = sim.section("kvEvents")
    return int(events.get("port", KV_EVENTS_PORT)) if events.get("enabled") else None


def models_yaml(sim: SimulatorSpec) -> str:
    header = f"# Rendered by llmsim-operator from LLMSimulator {sim.namespace}/{sim.name}; edits are overwritten.\n"
    return header + yaml.safe_dump(models_document(sim), sort_keys=False, default_flow_style=False)


def config_data(sim: SimulatorSpec, responses: str | None) -> dict[str, str]:
    """The ConfigMap's data: models.yml, and responses.yml when the spec gives one."""
    data = {MODELS_KEY: models_yaml(sim)}
    if responses is not None:
        data[RESPONSES_KEY] = responses
    return data


def config_hash(data: dict[str, str]) -> str:
    """Stable short hash of the ConfigMap data (order-independent)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
