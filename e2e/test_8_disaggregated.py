"""A disaggregated prefill/decode fleet and an HTTPS fleet on the real cluster.

P/D: one LLMSimulator gives a Deployment and a Service per role, labelled as llm-d's endpoint picker
reads them (llm-d.ai/role), every pod Ready; the scale subresource (kubectl scale) scales decode, a
patch scales prefill; deleting the LLMSimulator removes every child. TLS: a kubernetes.io/tls Secret
is mounted and the pods pass their probes over HTTPS and answer HTTPS.

What a P/D request does on the wire (kv_transfer_params, the side channel) is the simulator's part;
here the pods of each role answer as servers. P/D traffic through vllm-router: e2e/test_8b_pd_router.py.
"""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from e2e.cluster import Cluster, connects, deleting_namespace, kubectl, wait_for
from e2e.conftest import MODEL, WATCHED, selector

pytestmark = pytest.mark.e2e

SPEC: dict[str, Any] = {
    "model": {"name": MODEL, "profile": "qwen2.5-0.5b"},
    "hardware": {"profile": "l4-24gb"},
    "replicas": 1,
    "disaggregation": {"prefill": {"replicas": 1}, "link": {"bandwidthGbps": 25}},
}
NAME = "pd"
ROLES = ("prefill", "decode")


@pytest.fixture(scope="module")
def pd_namespace(cluster: Cluster) -> Iterator[str]:
    with deleting_namespace(cluster, f"llmsim-e2e-pd-{NAME}") as name:
        WATCHED.append(name)
        yield name


def role_selector(role: str) -> str:
    return f"{selector(NAME)},llm-d.ai/role={role}"


def wait_role_ready(cluster: Cluster, namespace: str, role: str, replicas: int) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        obj = cluster.simulator(namespace, NAME) or {}
        status = obj.get("status") or {}
        current = status.get("observedGeneration") == obj.get("metadata", {}).get("generation")
        counted = (status.get("roles") or {}).get(role, {}).get("ready") == f"{replicas}/{replicas}"
        pods = len(cluster.ready_pods(namespace, role_selector(role))) == replicas
        return obj if current and counted and pods else None

    return wait_for(f"{role} {replicas}/{replicas} ready", ready)


def test_a_disaggregated_fleet_deploys_scales_per_role_and_cleans_up(cluster: Cluster, pd_namespace: str) -> None:
    ns = pd_namespace
    cluster.create_simulator(ns, NAME, SPEC)
    for role in ROLES:
        obj = wait_role_ready(cluster, ns, role, 1)
    status = obj["status"]
    assert status["ready"] == "1/1"  # the decode role: spec.replicas, the scale subresource's
    assert status["gpus"] == 2
    assert status["selector"] == role_selector("decode")

    for role in ROLES:
        deployment = cluster.apps.read_namespaced_deployment(f"{NAME}-{role}", ns)
        assert deployment.spec.template.metadata.labels["llm-d.ai/role"] == role
        (pod,) = cluster.ready_pods(ns, role_selector(role))
        service = cluster.core.read_namespaced_service(f"{NAME}-{role}", ns)
        assert service.spec.selector["llm-d.ai/role"] == role
        # Each role's Service reaches its pod and nothing else.
        endpoints = cluster.core.read_namespaced_endpoints(f"{NAME}-{role}", ns)
        assert [a.ip for s in endpoints.subsets for a in s.addresses] == [pod.status.pod_ip]
        with cluster.http() as http:
            models = http.get(cluster.service_url(ns, f"{NAME}-{role}") + "/v1/models")
        assert models.status_code == 200
        assert [m["id"] for m in models.json()["data"]] == [MODEL]
        assert status["roles"][role]["endpoint"] == f"http://{NAME}-{role}.{ns}.svc:8000"
    (prefill,) = cluster.ready_pods(ns, role_selector("prefill"))
    ports = {p.name: p.container_port for p in prefill.spec.containers[0].ports}
    assert ports == {"http": 8000, "side-channel": 5600}
    env = {e.name: e.value_from.field_ref.field_path for e in prefill.spec.containers[0].env if e.value_from.field_ref}
    assert env["POD_IP"] == "status.podIP"

    # kubectl scale scales decode; prefill by a patch of its own count.
    kubectl("-n", ns, "scale", f"llmsim/{NAME}", "--replicas=2")
    wait_role_ready(cluster, ns, "decode", 2)
    assert cluster.apps.read_namespaced_deployment(f"{NAME}-prefill", ns).spec.replicas == 1
    kubectl(
        "-n",
        ns,
        "patch",
        "llmsim",
        NAME,
        "--type=merge",
        "-p",
        '{"spec":{"disaggregation":{"prefill":{"replicas":2}}}}',
    )
    obj = wait_role_ready(cluster, ns, "prefill", 2)
    assert obj["status"]["gpus"] == 4
    assert cluster.apps.read_namespaced_deployment(f"{NAME}-decode", ns).spec.replicas == 2

    kubectl("-n", ns, "delete", "llmsim", NAME, "--wait=true")

    def gone() -> bool | None:
        left = [
            *cluster.apps.list_namespaced_deployment(ns).items,
            *cluster.core.list_namespaced_service(ns).items,
            *cluster.core.list_namespaced_config_map(ns, label_selector=selector(NAME)).items,
            *cluster.core.list_namespaced_pod(ns, label_selector=selector(NAME)).items,
        ]
        return True if not left else None

    wait_for("every child of the P/D fleet garbage-collected", gone)


def test_tls_from_a_secret(cluster: Cluster, pd_namespace: str, tmp_path: Path) -> None:
    ns, name = pd_namespace, "tls"
    key, cert = tmp_path / "tls.key", tmp_path / "tls.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}.{ns}.svc",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    kubectl("-n", ns, "create", "secret", "tls", "tls-cert", f"--cert={cert}", f"--key={key}")
    cluster.create_simulator(
        ns, name, {"model": {"name": MODEL}, "engine": "instant", "tls": {"secretName": "tls-cert"}}
    )
    obj = cluster.wait_ready(ns, name, 1)
    # Ready means the readiness probe passed over HTTPS.
    assert obj["status"]["endpoint"] == f"https://{name}.{ns}.svc:8000"
    (pod,) = cluster.ready_pods(ns, selector(name))
    probe = pod.spec.containers[0].readiness_probe.http_get
    assert probe.scheme == "HTTPS"
    if not connects(pod.status.pod_ip, 8000):
        pytest.skip("this host does not route to pod IPs")
    # The pod serves the Secret's certificate, and only HTTPS.
    served = ssl.get_server_certificate((pod.status.pod_ip, 8000))
    assert ssl.PEM_cert_to_DER_cert(served) == ssl.PEM_cert_to_DER_cert(cert.read_text())
    # The certificate names the Service, not the pod IP this host reaches.
    response = httpx.get(f"https://{pod.status.pod_ip}:8000/v1/models", verify=False, timeout=30)
    assert response.status_code == 200
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://{pod.status.pod_ip}:8000/v1/models", timeout=5)
