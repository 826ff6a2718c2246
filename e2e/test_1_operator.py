"""The operator as users install it (the release's install.yaml, run.sh): Ready only once kopf is connected,
running as a uid the image knows; and the CLI's `crd` / `manifests` after a plain `pip install llmsim`.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
import yaml

from e2e.cluster import OPERATOR_NAMESPACE, Cluster, kubectl, wait_for

pytestmark = pytest.mark.e2e


def test_operator_is_ready_because_its_probe_reaches_the_api(cluster: Cluster) -> None:
    pod = cluster.operator_pod()
    (status,) = pod.status.container_statuses
    assert status.ready
    assert status.restart_count == 0
    (container,) = pod.spec.containers
    assert container.readiness_probe.http_get.path == "/healthz"
    assert container.liveness_probe.tcp_socket is not None
    # kopf's /healthz answers with its probe handlers' results: ours lists LLMSimulators with kopf's credentials.
    with cluster.http() as http:
        response = http.get(cluster.pod_proxy_path(OPERATOR_NAMESPACE, pod.metadata.name, 8080) + "/healthz")
    assert response.status_code == 200
    assert response.json() == {"api": "ok"}


def test_operator_runs_as_a_uid_with_a_passwd_entry(cluster: Cluster) -> None:
    pod = cluster.operator_pod()
    assert pod.spec.security_context.run_as_user == 65532
    # What kopf asked and crashed on: getpass.getuser() for uid 65532 (the image now has a passwd entry).
    out = kubectl("-n", OPERATOR_NAMESPACE, "exec", pod.metadata.name, "--", "python", "-c",
                  "import getpass, os; print(os.getuid(), getpass.getuser())")  # fmt: skip
    assert out.split() == ["65532", "nonroot"]


def run_to_completion(cluster: Cluster, namespace: str, command: list[str]) -> tuple[str, str]:
    """Run ``command`` in the simulator image (a plain `pip install .`, no [operator] extra): (phase, log)."""
    name = f"cli-{uuid.uuid4().hex[:6]}"
    image = os.environ.get("E2E_SIMULATOR_IMAGE", "llmsim:e2e")
    pod: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "cli",
                    "image": image,
                    "command": command,
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }
    cluster.core.create_namespaced_pod(namespace, pod)

    def finished() -> str | None:
        phase = str(cluster.core.read_namespaced_pod(name, namespace).status.phase)
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(f"pod {name} to finish", finished)
    return phase, str(cluster.core.read_namespaced_pod_log(name, namespace))


def test_crd_and_manifests_need_no_operator_extra(cluster: Cluster, namespace: str) -> None:
    phase, log = run_to_completion(cluster, namespace, ["llmsim-operator", "crd", "--kube-version", "1.20"])
    assert phase == "Succeeded", log
    # The log holds both streams: the one-line note (stderr) and the CRD (stdout).
    note, _, document = log.partition("\n")
    assert note == "llmsim-operator: --kube-version 1.20: CRD without CEL rules (before 1.25; the operator checks them)"
    crd = yaml.safe_load(document)
    assert crd["kind"] == "CustomResourceDefinition"
    assert "x-kubernetes-validations" not in document
    phase, log = run_to_completion(cluster, namespace, ["llmsim-operator", "manifests"])
    assert phase == "Succeeded", log
    assert [d["kind"] for d in yaml.safe_load_all(log) if d][-1] == "Deployment"
    phase, log = run_to_completion(cluster, namespace, ["llmsim-operator", "run"])
    assert phase == "Failed"
    assert log.strip().splitlines() == [
        "llmsim-operator: 'run' needs the operator extra (pip install 'llmsim[operator]'): No module named 'kopf'"
    ]
