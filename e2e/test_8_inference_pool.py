"""An InferencePool from the operator on a real cluster: its selector picks exactly the fleet's pods.

The Gateway API Inference Extension CRDs (upstream copies, tests/operator/data/gie/) are installed
during the test, after the operator started, without their CEL rules and empty-string default
(Kubernetes < 1.25 refuses them: tests/operator/gie.py); if the cluster already has them, the
"installed later" part is skipped and they are left alone.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from tests.operator.gie import gie_crds

from e2e.cluster import Cluster, kubectl, wait_for

pytestmark = pytest.mark.e2e

POOL = ("inference.networking.k8s.io", "v1", "inferencepools")
OBJECTIVE = ("inference.networking.x-k8s.io", "v1alpha2", "inferenceobjectives")
OBJECTIVE_NAME = "pool-model"
SPEC: dict[str, Any] = {
    "model": {"name": "pool-model"},
    "engine": "instant",
    "replicas": 2,
    "inferencePool": {"endpointPickerRef": {"name": "epp", "port": {"number": 9002}}, "objectives": [{"priority": 5}]},
}
NEIGHBOUR: dict[str, Any] = {"model": {"name": "neighbour"}, "engine": "instant", "replicas": 1}


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions", []) if c["type"] == type_), {})


@pytest.fixture
def gie_installed_here() -> Iterator[bool]:
    """Whether this test installs the GIE CRDs (then it removes them afterwards)."""
    names = [crd["metadata"]["name"] for crd in gie_crds()]
    listed = json.loads(kubectl("get", "crd", "-o", "json"))["items"]
    present = {c["metadata"]["name"] for c in listed} & set(names)
    yield not present
    if not present:
        kubectl("delete", "crd", *names, "--ignore-not-found", timeout=120)


def pods(cluster: Cluster, namespace: str, labels: dict[str, str]) -> set[str]:
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    items = cluster.core.list_namespaced_pod(namespace, label_selector=selector).items
    return {p.metadata.name for p in items if p.metadata.deletion_timestamp is None}


def get(cluster: Cluster, resource: tuple[str, str, str], namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = cluster.custom.get_namespaced_custom_object(*resource[:2], namespace, resource[2], name)
    except Exception:  # a 404, or the API not served yet
        return None
    return found


def test_pool_selects_exactly_the_fleet_and_goes_with_it(
    cluster: Cluster, namespace: str, gie_installed_here: bool
) -> None:
    cluster.create_simulator(namespace, "pooled", SPEC)
    cluster.create_simulator(namespace, "neighbour", NEIGHBOUR)
    if gie_installed_here:
        waiting = wait_for(
            "the InferencePool condition to say the API is not served",
            lambda: (
                (sim := cluster.simulator(namespace, "pooled"))
                and condition(sim, "InferencePool").get("reason") == "APINotServed"
                and sim
            ),
        )
        assert condition(waiting, "Degraded")["status"] == "False"
        for crd in gie_crds():
            _create(crd)
    pool = wait_for("the InferencePool", lambda: get(cluster, POOL, namespace, "pooled"))
    objective = wait_for("the InferenceObjective", lambda: get(cluster, OBJECTIVE, namespace, OBJECTIVE_NAME))
    assert objective["spec"]["poolRef"]["name"] == "pooled"
    assert objective["spec"]["priority"] == 5
    wait_for(
        "the InferencePool condition to turn True",
        lambda: condition(cluster.simulator(namespace, "pooled"), "InferencePool").get("status") == "True",
    )

    cluster.wait_ready(namespace, "pooled", 2)
    cluster.wait_ready(namespace, "neighbour", 1)
    deployment = cluster.apps.read_namespaced_deployment("pooled", namespace)
    fleet = pods(cluster, namespace, deployment.spec.selector.match_labels)
    assert len(fleet) == 2
    assert pods(cluster, namespace, pool["spec"]["selector"]["matchLabels"]) == fleet
    assert pods(cluster, namespace, {"app.kubernetes.io/instance": "neighbour"}).isdisjoint(fleet)
    ports = sorted(
        p.container_port
        for c in deployment.spec.template.spec.containers
        for p in c.ports or []
        if p.name == "http" or p.name.startswith("http-")
    )
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == ports

    cluster.custom.delete_namespaced_custom_object("llmsim.io", "v1alpha1", namespace, "llmsimulators", "pooled")
    wait_for("the pool to be garbage-collected", lambda: get(cluster, POOL, namespace, "pooled") is None)
    wait_for(
        "the objective to be garbage-collected", lambda: get(cluster, OBJECTIVE, namespace, OBJECTIVE_NAME) is None
    )


def _create(crd: dict[str, Any]) -> None:
    """kubectl create, as users install CRDs (the typed client would send `default: ""` as null)."""
    done = subprocess.run(["kubectl", "create", "-f", "-"], input=json.dumps(crd), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    kubectl("wait", "--for", "condition=established", "--timeout=60s", f"crd/{crd['metadata']['name']}", timeout=90)
