"""Two fleets Ready; their status, printer columns and schema docs; traffic through the Service.

Traffic goes through the API server's service proxy (no cluster DNS needed), which picks one of the
Service's ready endpoints at random for every request, as kube-proxy would.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import openai
import pytest

from e2e.cluster import Cluster, kubectl, sum_samples
from e2e.conftest import FIXED, MODEL, SCHEDULER, sdk, selector

pytestmark = pytest.mark.e2e

#: qwen2.5-0.5b on l4-24gb: (24 GiB x 0.9 - 0.49e9 params x 2 B) / (12,288 B/token x 16) = 112,980.3.
SCHEDULER_BLOCKS = 112980


def conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: f"{c['status']}/{c['reason']}" for c in obj["status"]["conditions"]}


def test_both_fleets_ready_with_their_status(fleets: dict[str, dict[str, Any]], namespace: str) -> None:
    sched, fixed = fleets[SCHEDULER]["status"], fleets[FIXED]["status"]
    assert sched["ready"] == "2/2"
    assert sched["kvCacheBlocks"] == int((24 * 2**30 * 0.9 - 0.49e9 * 2) // (12288 * 16)) == SCHEDULER_BLOCKS
    assert sched["endpoint"] == f"http://{SCHEDULER}.{namespace}.svc:8000"
    assert sched["selector"] == selector(SCHEDULER)
    assert conditions(fleets[SCHEDULER])["Ready"] == "True/ReplicasReady"
    assert conditions(fleets[SCHEDULER])["Degraded"] == "False/Reconciled"
    assert fixed["ready"] == "1/1"
    assert "kvCacheBlocks" not in fixed  # the fixed engine simulates no KV cache and has no model size


def test_children_carry_the_config_hash_the_status_reports(
    cluster: Cluster, fleets: dict[str, dict[str, Any]], namespace: str
) -> None:
    for name, obj in fleets.items():
        deployment = cluster.apps.read_namespaced_deployment(name, namespace)
        assert deployment.spec.template.metadata.annotations["llmsim.io/config-hash"] == obj["status"]["configHash"]
        assert deployment.metadata.owner_references[0].uid == obj["metadata"]["uid"]
        for pod in cluster.ready_pods(namespace, selector(name)):
            assert pod.spec.security_context.run_as_non_root is True


def test_printer_columns(fleets: dict[str, dict[str, Any]], namespace: str) -> None:
    rows = [line.split() for line in kubectl("-n", namespace, "get", "llmsim", "--sort-by=.metadata.name").splitlines()]
    assert rows[0] == ["NAME", "MODEL", "HARDWARE", "ENGINE", "READY", "AGE"]
    # The fixed fleet gets the CRD's default hardware profile.
    assert [row[:5] for row in rows[1:]] == [
        [FIXED, MODEL, "h100-80gb", "fixed", "1/1"],
        [SCHEDULER, MODEL, "l4-24gb", "scheduler", "2/2"],
    ]


def test_kubectl_explain_documents_the_model(fleets: dict[str, dict[str, Any]]) -> None:
    text = " ".join(kubectl("explain", "llmsimulator.spec.model").split())
    assert "KIND: LLMSimulator" in text
    assert "The served model: its name, and its size from a built-in profile or explicit numbers" in text
    for field in ("contextLength", "kvBytesPerToken", "parametersBillions", "profile"):
        assert field in text
    assert "name <string> -required-" in text


def test_pod_disruption_budget_protects_the_two_replica_fleet(
    fleets: dict[str, dict[str, Any]], namespace: str
) -> None:
    # kubectl picks the served policy version (v1beta1 before Kubernetes 1.21), as the operator does.
    # Only the two-replica fleet has one: a budget over the single fixed pod would only block drains.
    assert kubectl("-n", namespace, "get", "pdb", "-o", "name").split() == [f"poddisruptionbudget.policy/{SCHEDULER}"]
    out = kubectl("-n", namespace, "get", "pdb", SCHEDULER, "-o",
                  "jsonpath={.spec.maxUnavailable} {.status.currentHealthy} {.status.disruptionsAllowed}")  # fmt: skip
    # Two healthy pods, at most one unavailable: the disruption controller allows one eviction.
    assert out.split() == ["1", "2", "1"]


def test_the_openai_sdk_through_the_service(
    cluster: Cluster, fleets: dict[str, dict[str, Any]], namespace: str
) -> None:
    with sdk(cluster, cluster.service_url(namespace, SCHEDULER)) as api:
        assert [m.id for m in api.models.list().data] == [MODEL]
        reply = api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "ping"}])
        assert reply.choices[0].message.content == "pong"


def test_streaming_through_a_port_forward_to_the_service(
    cluster: Cluster, fleets: dict[str, dict[str, Any]], namespace: str
) -> None:
    # Streams go through `kubectl port-forward svc/...`: Kubernetes 1.20's API-server service proxy cut
    # about one stream in six short ("incomplete chunked read") on pods that had just started, while
    # the same streams to the pod IPs (16 of 16) and through port-forwards never failed.
    base = cluster.port_forward(namespace, f"svc/{SCHEDULER}")
    with openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60) as api:
        for _ in range(5):
            stream = api.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "ping"}], stream=True
            )
            assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == "pong"


def test_metrics_show_the_operators_capacity(
    cluster: Cluster, fleets: dict[str, dict[str, Any]], namespace: str
) -> None:
    for pod in cluster.ready_pods(namespace, selector(SCHEDULER)):
        metrics = cluster.pod_metrics(namespace, pod.metadata.name)
        (labels,) = [dict(ls) for (name, ls) in metrics if name == "vllm:cache_config_info"]
        assert labels["num_gpu_blocks"] == str(SCHEDULER_BLOCKS)


WORKERS, REQUESTS_EACH = 4, 10


def finished_requests(cluster: Cluster, namespace: str) -> dict[str, float]:
    """Per scheduler pod: requests it finished (vllm:request_success_total, every finished_reason)."""
    return {
        pod.metadata.name: sum_samples(
            cluster.pod_metrics(namespace, pod.metadata.name), "vllm:request_success_total", model_name=MODEL
        )
        for pod in cluster.ready_pods(namespace, selector(SCHEDULER))
    }


def test_closed_loop_load_spreads_over_both_pods(
    cluster: Cluster, fleets: dict[str, dict[str, Any]], namespace: str
) -> None:
    before = finished_requests(cluster, namespace)
    assert len(before) == 2
    api = sdk(cluster, cluster.service_url(namespace, SCHEDULER))

    def worker(i: int) -> list[str]:
        # Closed loop: each worker sends its next request when the previous answer is complete.
        out = []
        for j in range(REQUESTS_EACH):
            reply = api.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"Repeat after me: worker {i} request {j}"}]
            )
            out.append(reply.choices[0].message.content or "")
        return out

    with api, concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        answers = [a for batch in pool.map(worker, range(WORKERS)) for a in batch]
    assert len(answers) == WORKERS * REQUESTS_EACH
    assert all(answers)
    after = finished_requests(cluster, namespace)
    served = {pod: after[pod] - before[pod] for pod in before}
    # Every request landed on exactly one pod...
    assert sum(served.values()) == WORKERS * REQUESTS_EACH
    # ... and both pods took a share: with a random pick per request, fewer than 5 of 40 on one pod
    # has a probability of 2 x P(Binomial(40, 1/2) < 5) = 1.7e-7.
    assert min(served.values()) >= 5, served
