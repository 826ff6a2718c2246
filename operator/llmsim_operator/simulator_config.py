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
    AGGREGATED,
    DECODE,
    KV_EVENTS_PORT,
    KV_EVENTS_TOPIC,
    PREFILL,
    RESPONSES_KEY,
    SIDE_CHANNEL_PORT,
    TOKENIZER_DIR,
    TOKENIZER_FILE,
    models_key,
)
from llmsim_operator.crd import MODELS
from llmsim_operator.simulator_schema import OMIT
from llmsim_operator.spec import SimulatorSpec

#: vLLM's kv_role of each role's pods.
KV_ROLES = {PREFILL: "kv_producer", DECODE: "kv_consumer"}


def models_document(sim: SimulatorSpec, role: str = AGGREGATED) -> dict[str, Any]:
    """models.yml (of one role of a disaggregated fleet) as a Python structure.

    Every spec field bound to a models.yml field (:data:`.crd.MODELS_FIELDS`) is copied to its
    place unless it equals llmsim's default (the file says what differs); what follows is what
    the operator decides: the hardware entry, which sections llmsim may see, the KV-events
    and tokenizer sections, and a role's part in the KV hand-over.
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
    # The link and connector fields are the roles' alone: an aggregated fleet hands no KV over.
    rendered_transfer = entry.pop("kv_transfer", None) or {}
    if role:
        entry["kv_transfer"] = _kv_transfer(rendered_transfer, role)
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


def _kv_transfer(rendered: dict[str, Any], role: str) -> dict[str, Any]:
    """models.yml's kv_transfer of one role: the spec's link and connector fields, plus the role's own."""
    out: dict[str, Any] = {"kv_role": KV_ROLES[role], **rendered}
    if role == PREFILL:
        # Decode pods pull from the address the prefill answer names: the pod's own IP (env POD_IP,
        # the same fill-in as the KV-events topic), not llmsim's default "localhost".
        out["side_channel_host"] = "{pod_ip}"
    return out


def side_channel_ports(sim: SimulatorSpec, role: str) -> list[int]:
    """Container ports of a prefill pod's side channel, one per data-parallel rank (vLLM: base + rank)."""
    if role != PREFILL:
        return []
    first = int(sim.section("disaggregation").get("sideChannelPort", SIDE_CHANNEL_PORT))
    return [first + r for r in range(sim.data_parallel_size)]


def kv_events_port(sim: SimulatorSpec) -> int | None:
    """The container port of the KV-events PUB socket, None when events are off."""
    events = sim.section("kvEvents")
    return int(events.get("port", KV_EVENTS_PORT)) if events.get("enabled") else None


def models_yaml(sim: SimulatorSpec, role: str = AGGREGATED) -> str:
    of = f" ({role} role)" if role else ""
    header = f"# Rendered by llmsim-operator from LLMSimulator {sim.namespace}/{sim.name}{of}; edits are overwritten.\n"
    return header + yaml.safe_dump(models_document(sim, role), sort_keys=False, default_flow_style=False)


def config_data(sim: SimulatorSpec, responses: str | None) -> dict[str, str]:
    """The ConfigMap's data: models.yml (one per role when disaggregated), and responses.yml when the spec gives one."""
    data = {models_key(role): models_yaml(sim, role) for role in sim.roles}
    if responses is not None:
        data[RESPONSES_KEY] = responses
    return data


def config_hash(data: dict[str, str]) -> str:
    """Stable short hash of the ConfigMap data (order-independent)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
