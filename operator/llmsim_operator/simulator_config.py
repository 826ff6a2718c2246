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
from llmsim_operator.crd import MODELS
from llmsim_operator.simulator_schema import OMIT
from llmsim_operator.spec import SimulatorSpec


def models_document(sim: SimulatorSpec) -> dict[str, Any]:
    """models.yml as a Python structure.

    Every spec field bound to a models.yml field (:data:`.crd.MODELS_FIELDS`) is copied to its
    place unless it equals llmsim's default (the file says what differs); what follows is what
    the operator decides: the hardware entry, which sections llmsim may see, and the KV-events
    and tokenizer sections.
    """
    doc: dict[str, Any] = {"version": 1}
    # The first keys a reader looks for, first (the loop below sets name and engine again).
    entry: dict[str, Any] = {"name": sim.model["name"], "engine": sim.engine, "hardware": sim.hardware_name}
    for binding in MODELS.bindings:
        value = _get(sim.spec, binding.spec)
        if value is not None and (value := binding.convert(value)) is not OMIT:
            _put(doc if binding.document else entry, binding.target, value)
    # Weights and KV cache only when their size is known: llmsim requires it once the section exists.
    if "profile" not in entry and "parameters_billions" not in entry.get("weights", {}):
        entry.pop("weights", None)
    if sim.kv_cache_blocks is None:
        entry.pop("kv_cache", None)
    # llmsim's fixed engine needs the section, whose every field has a default (the CRD's too).
    if sim.engine == "fixed":
        entry.setdefault("latency", {})
    entry.update(_routing(sim))
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


def _get(spec: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = spec
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _put(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    *sections, key = path
    for section in sections:
        doc = doc.setdefault(section, {})
    doc[key] = value


def _routing(sim: SimulatorSpec) -> dict[str, Any]:
    """models.yml's kv_events and tokenizer sections, from spec.kvEvents and spec.tokenizer."""
    out: dict[str, Any] = {}
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
