"""P/D traffic through the real vllm-router, and data-parallel ranks, on the real cluster.

P/D: a disaggregated LLMSimulator (one prefill, one decode pod) behind vllm-router 0.1.17
(``--vllm-pd-disaggregation``, the image of deploy/vllm-router, which e2e/run.sh builds) in a
Deployment of its own. Every request of a bounded workload (completions, streamed and not) is
answered through the router; the prefill pod counts every prompt token once
(``vllm:prompt_tokens_total``), the decode pod counts every one as pulled over the side channel
(``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``), and afterwards neither
holds a KV block. The prompts are token ids, so the expected count is known by construction, not
taken from a tokenizer of the server's.

Data parallel: ``dataParallel.size: 2`` with ``external`` load balancing gives each rank its own
port and a Service port per rank, each rank's /metrics with only its own ``engine`` label and its
own requests; with ``internal`` one port serves both ranks, a request pinned by vLLM's
``X-data-parallel-rank`` header runs on that rank.

The cluster (1.20 here) has no DNS: the router reaches the role Services by their ClusterIPs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial
from typing import Any

import httpx
import openai
import pytest

from e2e.cluster import Cluster, connects, deleting_namespace, parse_metrics, sum_samples, wait_for
from e2e.conftest import MODEL, WATCHED, selector

pytestmark = pytest.mark.e2e

ROUTER_IMAGE = os.environ.get("E2E_ROUTER_IMAGE", "vllm-router:e2e")
ROUTER_PORT = 8080
ROUTER_SELECTOR = "app.kubernetes.io/name=vllm-router"
#: A small, fast model: the scheduler engine with a 1 ms step overhead.
BASE: dict[str, Any] = {
    "model": {"name": MODEL, "profile": "qwen2.5-0.5b"},
    "hardware": {"profile": "l4-24gb"},
    "engine": "scheduler",
    "replicas": 1,
    "latency": {"stepOverheadMs": 1},
}
PD, DP_EXTERNAL, DP_INTERNAL = "pd", "dp-ext", "dp-int"
SPECS: dict[str, dict[str, Any]] = {
    PD: {**BASE, "disaggregation": {"prefill": {"replicas": 1}, "link": {"bandwidthGbps": 25}}},
    DP_EXTERNAL: {**BASE, "dataParallel": {"size": 2, "loadBalancing": "external"}},
    DP_INTERNAL: {**BASE, "dataParallel": {"size": 2, "loadBalancing": "internal"}},
}
#: The workload: 12 completions whose prompts are token ids, lengths 20, 27, ..., 97. Each starts
#: with its own ids, so no two share a KV block: the decode pod finds nothing of a prompt in its own
#: prefix cache and pulls all of it.
PROMPTS = [[1000 * (i + 1) + j for j in range(20 + 7 * i)] for i in range(12)]
MAX_TOKENS = 4
ROLES = ("prefill", "decode")


@pytest.fixture(scope="module")
def fleets(cluster: Cluster) -> Iterator[str]:
    """A namespace with the three LLMSimulators, created together so their pods start together."""
    with deleting_namespace(cluster, "llmsim-e2e-pd-router") as ns:
        WATCHED.append(ns)
        for name, spec in SPECS.items():
            cluster.create_simulator(ns, name, spec)
        yield ns


def role_selector(role: str) -> str:
    return f"{selector(PD)},llm-d.ai/role={role}"


def role_pod(cluster: Cluster, ns: str, role: str) -> Any:
    pods = wait_for(f"the {role} pod Ready", lambda: cluster.ready_pods(ns, role_selector(role)))
    assert len(pods) == 1, [p.metadata.name for p in pods]
    return pods[0]


def router_deployment(prefill_url: str, decode_url: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "vllm-router"}
    args = ["--vllm-pd-disaggregation", "--prefill", prefill_url, "--decode", decode_url]
    args += ["--host", "0.0.0.0", "--port", str(ROUTER_PORT), "--policy", "round_robin", "--log-level", "warning"]
    container = {
        "name": "router",
        "image": ROUTER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "ports": [{"name": "http", "containerPort": ROUTER_PORT}],
        # Healthy once both workers answered its health check (it waits for them at startup).
        "readinessProbe": {"httpGet": {"path": "/health", "port": ROUTER_PORT}, "periodSeconds": 2},
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm-router", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def cluster_ip(cluster: Cluster, ns: str, name: str) -> str | None:
    services = cluster.core.list_namespaced_service(ns, field_selector=f"metadata.name={name}").items
    return str(services[0].spec.cluster_ip) if services else None


def kv_usage(cluster: Cluster, ns: str, pod: Any) -> float:
    return sum_samples(cluster.pod_metrics(ns, pod.metadata.name), "vllm:kv_cache_usage_perc", model_name=MODEL)


def test_pd_traffic_through_vllm_router_is_answered_counted_once_and_freed(cluster: Cluster, fleets: str) -> None:
    ns = fleets
    # The role Services exist once the operator has reconciled; the router needs their addresses.
    ips = {role: wait_for(f"Service {PD}-{role}", partial(cluster_ip, cluster, ns, f"{PD}-{role}")) for role in ROLES}
    cluster.apps.create_namespaced_deployment(
        ns, router_deployment(f"http://{ips['prefill']}:8000", f"http://{ips['decode']}:8000")
    )
    prefill, decode = role_pod(cluster, ns, "prefill"), role_pod(cluster, ns, "decode")
    (router,) = wait_for("the vllm-router pod Ready", lambda: cluster.ready_pods(ns, ROUTER_SELECTOR))
    ip = router.status.pod_ip
    if connects(ip, ROUTER_PORT):
        base = f"http://{ip}:{ROUTER_PORT}"
    else:
        base = cluster.port_forward(ns, f"pod/{router.metadata.name}", ROUTER_PORT)

    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    for i, prompt in enumerate(PROMPTS):
        if i % 2:
            chunks = client.completions.create(model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, stream=True)
            texts = [c.choices[0].text for c in chunks if c.choices]
            assert "".join(texts), f"request {i}: an empty stream"
        else:
            answer = client.completions.create(model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS)
            assert answer.choices[0].text, f"request {i}: no text"
            assert answer.choices[0].finish_reason == "length"
            assert answer.usage is not None
            assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (len(prompt), MAX_TOKENS)

    # Blocks held for a pull are released by it; the decode leg's own when it finishes.
    wait_for(
        "no KV block held on either pod", lambda: kv_usage(cluster, ns, prefill) + kv_usage(cluster, ns, decode) == 0
    )
    expected = sum(len(p) for p in PROMPTS)
    legs = len(PROMPTS)
    on_prefill = cluster.pod_metrics(ns, prefill.metadata.name)
    on_decode = cluster.pod_metrics(ns, decode.metadata.name)
    assert sum_samples(on_prefill, "vllm:prompt_tokens_total", model_name=MODEL) == expected
    assert sum_samples(on_prefill, "vllm:prompt_tokens_by_source_total", source="local_compute") == expected
    pulled = sum_samples(on_decode, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer")
    assert pulled == expected
    # vLLM's count of a decode leg: its last prompt token recomputed (for its logits), nothing else.
    assert sum_samples(on_decode, "vllm:prompt_tokens_by_source_total", source="local_compute") == legs
    # The router capped each prefill leg at one token ("length"); each decode leg gave the answer.
    assert sum_samples(on_prefill, "vllm:request_success_total", finished_reason="length") == legs
    assert sum_samples(on_prefill, "vllm:generation_tokens_total") == legs
    assert sum_samples(on_decode, "vllm:request_success_total", finished_reason="length") == legs
    assert sum_samples(on_decode, "vllm:generation_tokens_total") == legs * MAX_TOKENS


def engines(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> set[str]:
    """The ``engine`` label values of a /metrics page's vllm: series."""
    return {
        dict(labels)["engine"] for (name, labels) in metrics if name.startswith("vllm:") and "engine" in dict(labels)
    }


def completion_status(http: httpx.Client, url: str, headers: dict[str, str] | None = None) -> int:
    body = {"model": MODEL, "prompt": [7, 8, 9, 10], "max_tokens": 2}
    return http.post(url + "/v1/completions", json=body, headers=headers).status_code


def test_external_data_parallel_ranks_have_a_port_each(cluster: Cluster, fleets: str) -> None:
    ns, name = fleets, DP_EXTERNAL
    obj = cluster.wait_ready(ns, name, 1)
    assert obj["status"]["gpus"] == 2
    (pod,) = cluster.ready_pods(ns, selector(name))
    assert {p.name: p.container_port for p in pod.spec.containers[0].ports} == {"http": 8000, "http-1": 8001}
    service = cluster.core.read_namespaced_service(name, ns)
    assert {p.name: (p.port, p.target_port) for p in service.spec.ports} == {
        "http": (8000, "http"),
        "http-1": (8001, "http-1"),
    }
    with cluster.http() as http:
        for rank, port in enumerate(("http", "http-1")):
            # Through the Service's port of this rank: one request, then the rank's own /metrics.
            url = cluster.service_url(ns, name, port)
            assert completion_status(http, url) == 200
            page = http.get(url + "/metrics")
            assert page.status_code == 200
            metrics = parse_metrics(page.text)
            assert engines(metrics) == {str(rank)}
            assert sum_samples(metrics, "vllm:request_success_total", model_name=MODEL) == 1
    # The pod's own port 8000 + r is the same rank.
    assert engines(cluster.pod_metrics(ns, pod.metadata.name, 8001)) == {"1"}


def test_internal_data_parallel_ranks_share_one_port(cluster: Cluster, fleets: str) -> None:
    ns, name = fleets, DP_INTERNAL
    obj = cluster.wait_ready(ns, name, 1)
    assert obj["status"]["gpus"] == 2
    (pod,) = cluster.ready_pods(ns, selector(name))
    assert [(p.name, p.container_port) for p in pod.spec.containers[0].ports] == [("http", 8000)]
    service = cluster.core.read_namespaced_service(name, ns)
    assert [(p.name, p.port) for p in service.spec.ports] == [("http", 8000)]
    url = cluster.service_url(ns, name)
    with cluster.http() as http:
        # vLLM's header pins a request to a rank (vllm-router's --intra-node-data-parallel-size sends it).
        assert completion_status(http, url, {"X-data-parallel-rank": "1"}) == 200
        metrics = parse_metrics(http.get(url + "/metrics").text)
    assert engines(metrics) == {"0", "1"}
    done = {r: sum_samples(metrics, "vllm:request_success_total", engine=r) for r in ("0", "1")}
    assert done == {"0": 0, "1": 1}
