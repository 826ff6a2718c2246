"""A staging fleet a gateway is tested against, on the cluster: slow start, faults on demand, prefix cache, LoRA.

One LLMSimulator of two replicas with a simulated model load (``startupSeconds``), faults that obey the
``x-llmsim-fault`` header and ``/admin/faults``, ``usage.prompt_tokens_details`` and one LoRA adapter, as a
team would deploy it to test a gateway's routing and failover. Requests go to each pod directly (its pod IP
from this host, or a port-forward) when a test must know which replica answers, and through the Service
(the API server's proxy) when it must not. The crash test runs last: it restarts a pod.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from e2e.cluster import Cluster, kubectl, sum_samples, wait_for
from e2e.conftest import selector

pytestmark = pytest.mark.e2e

NAME = "staging"
MODEL = "staging-model"
ADAPTER = "sql-adapter"
STARTUP_SECONDS = 8
#: The CR's default KV block size (vLLM's 16).
BLOCK_SIZE = 16
SPEC: dict[str, Any] = {
    "model": {"name": MODEL, "profile": "qwen2.5-0.5b"},
    "hardware": {"profile": "l4-24gb"},
    "engine": "scheduler",
    "replicas": 2,
    "startupSeconds": STARTUP_SECONDS,
    "faults": {"headerOverride": True},
    "enablePromptTokensDetails": True,
    "lora": {"maxLoras": 1, "adapters": [{"name": ADAPTER}]},
}


@pytest.fixture(scope="module")
def staging(cluster: Cluster, namespace: str) -> dict[str, Any]:
    cluster.create_simulator(namespace, NAME, SPEC)
    return cluster.wait_ready(namespace, NAME, SPEC["replicas"])


@pytest.fixture(scope="module")
def pods(cluster: Cluster, namespace: str, staging: dict[str, Any]) -> dict[str, str]:
    """Pod name -> its base URL, for both replicas."""
    urls = cluster.pod_urls(namespace, selector(NAME))
    assert len(urls) == 2
    return urls


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60) as client:
        yield client


def chat(content: str, max_tokens: int = 4, model: str = MODEL) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}


def test_pods_turn_ready_only_after_the_simulated_model_load(
    cluster: Cluster, namespace: str, staging: dict[str, Any]
) -> None:
    # The process binds at once (the startup probe's /ping answers) but /health says 503 until the
    # simulated load is over, so Kubernetes (and every gateway reading endpoints) sees the pod late.
    for pod in cluster.ready_pods(namespace, selector(NAME)):
        started = pod.status.container_statuses[0].state.running.started_at
        ready = next(c.last_transition_time for c in pod.status.conditions if c.type == "Ready")
        # Both timestamps have a resolution of one second.
        assert (ready - started).total_seconds() >= STARTUP_SECONDS - 1, pod.metadata.name


def test_a_forced_fault_reaches_the_client_through_the_service(
    cluster: Cluster, namespace: str, staging: dict[str, Any]
) -> None:
    url = cluster.service_url(namespace, NAME) + "/v1/chat/completions"
    with cluster.http() as http:
        limited = http.post(url, json=chat("hello"), headers={"x-llmsim-fault": "rate_limit"})
        healthy = http.post(url, json=chat("hello"))
    assert limited.status_code == 429, limited.text
    assert int(limited.headers["retry-after"]) >= 1
    assert limited.json()["error"]["code"] == 429
    assert healthy.status_code == 200, healthy.text


def test_admin_faults_turn_one_replica_bad_and_back(
    cluster: Cluster, namespace: str, pods: dict[str, str], http: httpx.Client
) -> None:
    (bad, bad_url), (good, good_url) = sorted(pods.items())
    before = sum_samples(cluster.pod_metrics(namespace, bad), "llmsim_faults_injected_total", kind="server_error")
    # The settings the operator wrote (header_override on), to put back: a PUT of {} would turn it off.
    configured = http.get(f"{bad_url}/admin/faults").json()
    assert configured[MODEL]["header_override"] is True
    put = http.put(f"{bad_url}/admin/faults", json={MODEL: {"header_override": True, "rates": {"server_error": 1.0}}})
    assert put.status_code == 200, put.text
    try:
        statuses = {
            name: [http.post(f"{url}/v1/chat/completions", json=chat(f"turn {i}")).status_code for i in range(5)]
            for name, url in ((bad, bad_url), (good, good_url))
        }
    finally:
        restored = http.put(f"{bad_url}/admin/faults", json=configured)
        assert restored.status_code == 200, restored.text
        assert restored.json() == configured
    assert statuses == {bad: [500] * 5, good: [200] * 5}
    after = sum_samples(cluster.pod_metrics(namespace, bad), "llmsim_faults_injected_total", kind="server_error")
    assert after - before == 5
    assert http.post(f"{bad_url}/v1/chat/completions", json=chat("healthy again")).status_code == 200


def test_a_repeated_prompt_hits_its_replicas_prefix_cache(
    cluster: Cluster, namespace: str, pods: dict[str, str], http: httpx.Client
) -> None:
    name, url = sorted(pods.items())[0]
    metrics = cluster.pod_metrics(namespace, name)
    hits, queries = (
        sum_samples(metrics, "vllm:prefix_cache_hits_total"),
        sum_samples(metrics, "vllm:prefix_cache_queries_total"),
    )
    # A prompt no earlier request shares beyond the chat template's first tokens.
    words = " ".join(f"{uuid.uuid4().hex[:8]} item {i}" for i in range(120))
    first = http.post(f"{url}/v1/chat/completions", json=chat(words)).json()["usage"]
    second = http.post(f"{url}/v1/chat/completions", json=chat(words)).json()["usage"]
    n = first["prompt_tokens"]
    assert second["prompt_tokens"] == n > 300
    # vLLM's rule: every full block but the one holding the last prompt token, which is computed.
    assert second["prompt_tokens_details"]["cached_tokens"] == (n - 1) // BLOCK_SIZE * BLOCK_SIZE
    assert first["prompt_tokens_details"]["cached_tokens"] < BLOCK_SIZE * 4  # the template's shared start at most
    metrics = cluster.pod_metrics(namespace, name)
    cached = first["prompt_tokens_details"]["cached_tokens"] + second["prompt_tokens_details"]["cached_tokens"]
    assert sum_samples(metrics, "vllm:prefix_cache_hits_total") - hits == cached
    assert sum_samples(metrics, "vllm:prefix_cache_queries_total") - queries == 2 * n


def test_the_lora_adapter_is_listed_and_served(pods: dict[str, str], http: httpx.Client) -> None:
    for url in pods.values():
        models = {m["id"]: m for m in http.get(f"{url}/v1/models").json()["data"]}
        assert models[ADAPTER]["parent"] == MODEL
        response = http.post(f"{url}/v1/chat/completions", json=chat("select", model=ADAPTER))
        assert response.status_code == 200, response.text
        assert response.json()["model"] == ADAPTER


def test_a_crash_fault_restarts_the_pod_and_the_other_keeps_serving(
    cluster: Cluster, namespace: str, pods: dict[str, str], http: httpx.Client
) -> None:
    (victim, victim_url), (_, survivor_url) = sorted(pods.items())
    with pytest.raises(httpx.TransportError):  # the process exits mid-request: the connection drops
        http.post(f"{victim_url}/v1/chat/completions", json=chat("boom"), headers={"x-llmsim-fault": "crash"})
    assert http.post(f"{survivor_url}/v1/chat/completions", json=chat("still here")).status_code == 200

    def restarted_and_ready() -> Any:
        pod = cluster.core.read_namespaced_pod(victim, namespace)
        status = pod.status.container_statuses[0]
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        return pod if status.restart_count == 1 and ready else None

    pod = wait_for(f"{victim} restarted and Ready", restarted_and_ready, timeout=120)
    terminated = pod.status.container_statuses[0].last_state.terminated
    assert terminated.exit_code == 70
    log = kubectl("-n", namespace, "logs", victim, "--previous")
    assert "crash fault injected" in log
