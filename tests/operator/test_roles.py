"""Disaggregated prefill/decode fleets, data-parallel ranks and TLS: rendering, refusals and status.

Expected values come from what the consumers read: llm-d's role label (llm-d.ai/role), vLLM's
kv_role names and NIXL's side-channel port per rank (base + rank), llmsim's own models.yml loader
(it must accept each role's file and refuse what the operator refuses), and Kubernetes' port-name
rules.
"""

from __future__ import annotations

from typing import Any

import pytest

from llmsim.config.loader import parse_models_config
from llmsim.errors import ConfigError
from llmsim_operator import conventions as c
from llmsim_operator.render import Children, Owner, render_children
from llmsim_operator.simulator_config import config_data, models_yaml
from llmsim_operator.spec import InvalidSpec, parse_spec
from llmsim_operator.status import Fleet, with_deployment
from tests.operator.builders import NAMESPACE, UID, minimal_spec

IMAGE = "ghcr.io/llmsim/llmsim:test"


def render(spec: dict[str, Any], name: str = "llama") -> Children:
    sim = parse_spec(name, NAMESPACE, spec)
    return render_children(sim, Owner(name, UID), config_data(sim, None), IMAGE)


def pd(**extra: Any) -> dict[str, Any]:
    return minimal_spec() | {"disaggregation": {"prefill": {"replicas": 2}}, "replicas": 3} | extra


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def test_one_deployment_and_service_per_role_with_llm_d_role_labels() -> None:
    children = render(pd())
    assert [d["metadata"]["name"] for d in children.deployments] == ["llama-prefill", "llama-decode"]
    assert [s["metadata"]["name"] for s in children.services] == ["llama-prefill", "llama-decode"]
    for role, dep, svc in zip(("prefill", "decode"), children.deployments, children.services, strict=True):
        selector = {"app.kubernetes.io/name": "llmsim", "app.kubernetes.io/instance": "llama", "llm-d.ai/role": role}
        assert dep["spec"]["selector"]["matchLabels"] == selector
        assert dep["spec"]["template"]["metadata"]["labels"]["llm-d.ai/role"] == role
        assert svc["spec"]["selector"] == selector
        assert container(dep)["args"][:2] == ["--config", f"/etc/llmsim/models-{role}.yml"]
    # spec.replicas (the scale subresource) counts decode pods; prefill has its own count.
    assert [d["spec"]["replicas"] for d in children.deployments] == [2, 3]
    assert children.deployment["metadata"]["name"] == "llama-decode"
    assert set(children.config_map["data"]) == {"models-prefill.yml", "models-decode.yml"}


def test_each_roles_models_yml_is_what_llmsim_loads_with_its_kv_role() -> None:
    sim = parse_spec("llama", NAMESPACE, pd(disaggregation={"link": {"bandwidthGbps": 25}, "sideChannelPort": 6000}))
    prefill = parse_models_config(models_yaml(sim, "prefill"), "models.yml").models[0].kv_transfer
    decode = parse_models_config(models_yaml(sim, "decode"), "models.yml").models[0].kv_transfer
    assert prefill is not None
    assert decode is not None
    assert (prefill.kv_role, decode.kv_role) == ("kv_producer", "kv_consumer")
    # Decode pods pull from the prefill pod's own IP, filled in from env POD_IP by the simulator.
    assert prefill.side_channel_host == "{pod_ip}"
    assert (prefill.bandwidth_gbps, decode.bandwidth_gbps) == (25, 25)
    assert (prefill.side_channel_port, prefill.kv_connector) == (6000, "NixlConnector")
    # An aggregated fleet hands nothing over.
    assert (
        parse_models_config(models_yaml(parse_spec("a", NAMESPACE, minimal_spec())), "m").models[0].kv_transfer is None
    )


def test_prefill_pods_expose_the_side_channel_per_rank_and_know_their_ip() -> None:
    children = render(pd(dataParallel={"size": 3}))
    prefill, decode = (container(d) for d in children.deployments)
    # vLLM's NIXL side channel: VLLM_NIXL_SIDE_CHANNEL_PORT + data-parallel rank.
    assert [(p["name"], p["containerPort"]) for p in prefill["ports"]] == [
        ("http", 8000),
        ("side-channel", 5600),
        ("side-channel-1", 5601),
        ("side-channel-2", 5602),
    ]
    assert [p["name"] for p in decode["ports"]] == ["http"]
    pod_ip = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    assert pod_ip in prefill["env"]
    assert "POD_IP" not in [e["name"] for e in decode["env"]]
    # Every port name is an IANA_SVC_NAME: at most 15 characters.
    assert all(len(p["name"]) <= 15 for p in prefill["ports"])


def test_no_service_over_both_roles_and_the_budget_covers_every_pod() -> None:
    children = render(pd(podDisruptionBudget={"enabled": True}, monitoring={"serviceMonitor": {"enabled": True}}))
    assert "llama" not in [s["metadata"]["name"] for s in children.services]
    assert children.pod_disruption_budget is not None
    assert children.pod_disruption_budget["spec"]["selector"]["matchLabels"] == c.selector_labels("llama")
    # One ServiceMonitor finds both roles' Services (and so each pod once).
    monitor = children.service_monitor
    assert monitor is not None
    assert monitor["spec"]["selector"]["matchLabels"] == c.selector_labels("llama")


def test_an_external_autoscaler_owns_the_decode_count_only() -> None:
    children = render(pd(autoscaling={"external": True}))
    prefill, decode = children.deployments
    assert prefill["spec"]["replicas"] == 2
    assert "replicas" not in decode["spec"]
    assert children.pod_disruption_budget is None


def test_external_load_balancing_gives_each_rank_a_named_port_service_port_and_scrape_endpoint() -> None:
    spec = minimal_spec() | {
        "dataParallel": {"size": 4, "loadBalancing": "external"},
        "service": {"port": 9000},
        "monitoring": {"serviceMonitor": {"enabled": True}},
    }
    children = render(spec)
    # Rank r on container port 8000 + r (vLLM's --data-parallel-multi-port-external-lb: port + rank).
    assert [(p["name"], p["containerPort"]) for p in container(children.deployment)["ports"]] == [
        ("http", 8000),
        ("http-1", 8001),
        ("http-2", 8002),
        ("http-3", 8003),
    ]
    assert [(p["name"], p["port"], p["targetPort"]) for p in children.service["spec"]["ports"]] == [
        ("http", 9000, "http"),
        ("http-1", 9001, "http-1"),
        ("http-2", 9002, "http-2"),
        ("http-3", 9003, "http-3"),
    ]
    monitor = children.service_monitor
    assert monitor is not None
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http", "http-1", "http-2", "http-3"]
    entry = parse_models_config(children.config_map["data"]["models.yml"], "models.yml").models[0]
    assert (entry.data_parallel.size, entry.data_parallel.load_balancing) == (4, "external")


def test_internal_load_balancing_keeps_one_port() -> None:
    children = render(minimal_spec() | {"dataParallel": {"size": 4}})
    assert [p["name"] for p in container(children.deployment)["ports"]] == ["http"]
    assert [p["name"] for p in children.service["spec"]["ports"]] == ["http"]
    entry = parse_models_config(children.config_map["data"]["models.yml"], "models.yml").models[0]
    assert (entry.data_parallel.size, entry.data_parallel.load_balancing) == (4, "internal")


def test_tls_mounts_the_secret_and_switches_probes_and_scraping_to_https() -> None:
    children = render(
        minimal_spec() | {"tls": {"secretName": "certs"}, "monitoring": {"serviceMonitor": {"enabled": True}}}
    )
    pod = children.deployment["spec"]["template"]["spec"]
    ctr = container(children.deployment)
    assert ctr["args"][-4:] == ["--ssl-certfile", "/etc/llmsim-tls/tls.crt", "--ssl-keyfile", "/etc/llmsim-tls/tls.key"]
    assert {"name": "tls", "mountPath": "/etc/llmsim-tls", "readOnly": True} in ctr["volumeMounts"]
    assert {"name": "tls", "secret": {"secretName": "certs", "defaultMode": 0o440}} in pod["volumes"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert ctr[probe]["httpGet"]["scheme"] == "HTTPS"
    monitor = children.service_monitor
    assert monitor is not None
    assert {e["scheme"] for e in monitor["spec"]["endpoints"]} == {"https"}
    assert children.deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scheme"] == "https"


@pytest.mark.parametrize(
    ("spec", "name", "message"),
    [
        (pd(engine="fixed"), "llama", "disaggregation needs engine: scheduler"),
        (minimal_spec() | {"engine": "fixed", "dataParallel": {"size": 2}}, "llama", "dataParallel.size > 1 needs"),
        (pd(), "x" * 56, "at most 55 characters"),
        (
            minimal_spec()
            | {"kvEvents": {"enabled": True, "port": 8001}, "dataParallel": {"size": 2, "loadBalancing": "external"}},
            "llama",
            "kvEvents.port 8001 collides",
        ),
        (
            pd(disaggregation={"sideChannelPort": 5557}, kvEvents={"enabled": True}),
            "llama",
            "collides with kvEvents.port",
        ),
        (
            minimal_spec() | {"service": {"port": 65535}, "dataParallel": {"size": 2, "loadBalancing": "external"}},
            "llama",
            "exceeds 65535",
        ),
    ],
)
def test_refused_specs(spec: dict[str, Any], name: str, message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        parse_spec(name, NAMESPACE, spec)


@pytest.mark.parametrize("section", ["kv_transfer: {kv_role: kv_consumer}", "data_parallel: {size: 2}"])
def test_llmsim_refuses_the_same_for_other_engines(section: str) -> None:
    # What the engine rules mirror: llmsim's own startup refuses these on the fixed engine.
    with pytest.raises(ConfigError, match="needs engine: scheduler"):
        parse_models_config(f"models: [{{name: m, engine: fixed, {section}}}]", "models.yml")


def test_fixed_engine_with_one_rank_is_fine() -> None:
    parse_spec("llama", NAMESPACE, minimal_spec() | {"engine": "fixed", "dataParallel": {"size": 1}})


def deployment(replicas: int, ready: int) -> dict[str, Any]:
    status = {"replicas": replicas, "readyReplicas": ready, "updatedReplicas": replicas, "availableReplicas": ready}
    return {
        "metadata": {"generation": 1},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": 1, **status},
    }


def test_status_per_role_the_scaled_role_on_top_and_simulated_gpus() -> None:
    fleet = Fleet((("prefill", deployment(2, 1)), ("decode", deployment(3, 3))), gpus_per_pod=4)
    status = with_deployment({"roles": {"prefill": {"endpoint": "http://p"}}}, fleet, "2025-01-01T00:00:00Z")
    assert (status["replicas"], status["readyReplicas"], status["ready"]) == (3, 3, "3/3")
    assert status["roles"] == {
        "prefill": {"endpoint": "http://p", "replicas": 2, "readyReplicas": 1, "ready": "1/2"},
        "decode": {"replicas": 3, "readyReplicas": 3, "ready": "3/3"},
    }
    # (2 + 3) pods x 4 ranks.
    assert status["gpus"] == 20
    ready = next(cond for cond in status["conditions"] if cond["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "ReplicasNotReady",
        "prefill: 1/2 replicas ready",
    )


def test_status_of_a_missing_role_and_back_to_aggregated() -> None:
    fleet = Fleet((("prefill", None), ("decode", deployment(1, 1))))
    status = with_deployment({}, fleet, "2025-01-01T00:00:00Z")
    ready = next(cond for cond in status["conditions"] if cond["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "DeploymentMissing")
    aggregated = with_deployment(status, deployment(2, 2), "2025-01-01T00:00:00Z")
    assert "roles" not in aggregated
    assert aggregated["gpus"] == 2


def test_kv_events_get_a_port_per_rank() -> None:
    # The simulator (as vLLM) binds rank r's KV-event publisher on the configured port + r.
    children = render(minimal_spec() | {"kvEvents": {"enabled": True}, "dataParallel": {"size": 3}})
    ports = [(p["name"], p["containerPort"]) for p in container(children.deployment)["ports"]]
    assert ports == [("http", 8000), ("kv-events", 5557), ("kv-events-1", 5558), ("kv-events-2", 5559)]
    # Rank 1's events on 5600: the prefill pods' side channel.
    spec = pd(kvEvents={"enabled": True, "port": 5599}, dataParallel={"size": 2})
    with pytest.raises(InvalidSpec, match=r"sideChannelPort 5600 collides with kvEvents\.port"):
        parse_spec("llama", NAMESPACE, spec)
