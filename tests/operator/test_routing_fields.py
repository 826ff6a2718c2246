"""spec.lora, spec.kvEvents, spec.tokenizer, prefix caching: rendered into models.yml and the pod as llmsim reads them."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from llmsim.config.loader import parse_models_config
from llmsim_operator.conventions import MODELS_KEY
from llmsim_operator.render import Owner, render_children
from llmsim_operator.simulator_config import config_data
from llmsim_operator.spec import parse_spec
from tests.operator.builders import NAMESPACE, UID, minimal_spec
from tests.operator.test_crd import validator

IMAGE = "ghcr.io/llmsim/llmsim:test"


def routing_spec(**extra: Any) -> dict[str, Any]:
    return minimal_spec() | {
        "scheduler": {"enablePrefixCaching": False, "asyncScheduling": False},
        "enablePromptTokensDetails": True,
        "lora": {"maxLoras": 2, "maxCpuLoras": 4, "loadMs": 25, "adapters": [{"name": "sql", "path": "/a/sql"}]},
        "kvEvents": {"enabled": True},
        "tokenizer": {"configMapRef": {"name": "llama-tokenizer"}, "chatTemplate": "llama-3"},
        **extra,
    }


def rendered(spec: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    sim = parse_spec("llama", NAMESPACE, spec)
    data = config_data(sim, None)
    children = render_children(sim, Owner("llama", UID), data, IMAGE)
    return parse_models_config(data[MODELS_KEY], "models.yml").models[0], children.deployment


def test_the_routing_fields_reach_llmsims_models_yml() -> None:
    model, _ = rendered(routing_spec())
    assert model.kv_cache.enable_prefix_caching is False
    assert model.scheduler.async_scheduling is False
    assert model.enable_prompt_tokens_details is True
    assert (model.lora.max_loras, model.lora.max_cpu_loras, model.lora.load_ms) == (2, 4, 25)
    assert [(a.name, a.path) for a in model.lora.adapters] == [("sql", "/a/sql")]
    # Bound on every interface at vLLM's default port, with the topic llm-d's indexer parses.
    assert model.kv_events.enable_kv_cache_events
    assert (model.kv_events.endpoint, model.kv_events.topic) == ("tcp://*:5557", "kv@{pod_ip}@{model}")
    assert model.kv_events.event_format == "map"
    assert model.tokenizer.path == "/etc/llmsim-tokenizer/tokenizer.json"
    assert model.tokenizer.chat_template == "llama-3"


def test_unset_fields_leave_llmsims_defaults() -> None:
    model, deployment = rendered(minimal_spec())
    assert model.kv_cache.enable_prefix_caching is True
    assert model.lora is None
    assert model.kv_events is None
    assert model.tokenizer == "regex"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert [p["name"] for p in container["ports"]] == ["http"]
    # No POD_IP without KV events (the identity variables of the faults work are always there).
    assert "POD_IP" not in [e["name"] for e in container.get("env", [])]


def test_the_pod_exposes_the_events_port_knows_its_ip_and_mounts_the_tokenizer() -> None:
    _, deployment = rendered(routing_spec(kvEvents={"enabled": True, "port": 6000, "eventFormat": "array"}))
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "kv-events", "containerPort": 6000, "protocol": "TCP"} in container["ports"]
    # Added to the pod's identity variables, not in their place.
    assert [e["name"] for e in container["env"]] == ["LLMSIM_POD_NAME", "LLMSIM_POD_NAMESPACE", "POD_IP"]
    assert container["env"][-1] == {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    assert {"name": "tokenizer", "mountPath": "/etc/llmsim-tokenizer", "readOnly": True} in container["volumeMounts"]
    volume = next(v for v in pod["volumes"] if v["name"] == "tokenizer")
    assert volume["configMap"] == {
        "name": "llama-tokenizer",
        "items": [{"key": "tokenizer.json", "path": "tokenizer.json"}],
    }
    kubernetes_validate.validate(deployment, "1.28.0", strict=True)


@pytest.mark.parametrize(
    "extra",
    [
        {"kvEvents": {"enabled": True, "eventFormat": "json"}},
        {"kvEvents": {"port": 70000}},
        {"lora": {"maxLoras": 0}},
        {"lora": {"adapters": [{"path": "/no/name"}]}},
        {"tokenizer": {"chatTemplate": "chatml"}},
    ],
)
def test_the_schema_rejects_bad_routing_fields(extra: dict[str, Any]) -> None:
    spec = minimal_spec() | extra
    obj = {"apiVersion": "llmsim.io/v1alpha1", "kind": "LLMSimulator", "metadata": {"name": "x"}, "spec": spec}
    assert not validator().is_valid(obj)
