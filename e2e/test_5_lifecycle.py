"""What users do to a running fleet: scale it through the scale subresource, change what it says, delete it."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.cluster import Cluster, kubectl, wait_for
from e2e.conftest import MODEL, SCHEDULER, sdk, selector

pytestmark = pytest.mark.e2e

NEW_SCRIPT = """\
version: 1
responses:
  - id: ping
    match: {exact: ping, ignore_case: true}
    content: "pong, version 2"
default:
  content: "rolled out"
"""


def test_scale_from_two_to_three_through_the_scale_subresource(
    cluster: Cluster, fleets: dict[str, dict[str, Any]], namespace: str
) -> None:
    out = kubectl("-n", namespace, "scale", f"llmsimulator/{SCHEDULER}", "--replicas=3")
    assert "scaled" in out
    sim = cluster.wait_ready(namespace, SCHEDULER, 3)
    assert sim["spec"]["replicas"] == 3
    assert sim["status"]["ready"] == "3/3"
    assert cluster.apps.read_namespaced_deployment(SCHEDULER, namespace).spec.replicas == 3
    assert len(cluster.ready_pods(namespace, selector(SCHEDULER))) == 3
    # The scale subresource reads back what the operator wrote to status.
    scale = cluster.custom.get_namespaced_custom_object_scale(
        "llmsim.io", "v1alpha1", namespace, "llmsimulators", SCHEDULER
    )
    assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (3, 3)
    assert scale["status"]["selector"] == selector(SCHEDULER)


def test_new_responses_roll_the_pods_and_change_the_answers(
    cluster: Cluster, fleets: dict[str, dict[str, Any]], namespace: str
) -> None:
    replicas = cluster.simulator(namespace, SCHEDULER)["spec"]["replicas"]  # type: ignore[index]
    old_pods = {p.metadata.name for p in cluster.ready_pods(namespace, selector(SCHEDULER))}
    old_hash = cluster.simulator(namespace, SCHEDULER)["status"]["configHash"]  # type: ignore[index]
    with sdk(cluster, cluster.service_url(namespace, SCHEDULER)) as api:
        before = api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "ping"}])
        assert before.choices[0].message.content == "pong"
        cluster.patch_simulator(namespace, SCHEDULER, {"responses": {"inline": NEW_SCRIPT}})
        sim = cluster.wait_ready(namespace, SCHEDULER, replicas)
        new_hash = sim["status"]["configHash"]
        assert new_hash != old_hash

        def rolled() -> set[str] | None:
            pods = cluster.ready_pods(namespace, selector(SCHEDULER))
            hashes = {p.metadata.annotations["llmsim.io/config-hash"] for p in pods}
            names = {p.metadata.name for p in pods}
            everything = cluster.core.list_namespaced_pod(namespace, label_selector=selector(SCHEDULER)).items
            done = hashes == {new_hash} and len(pods) == replicas == len(everything) and not names & old_pods
            return names if done else None

        wait_for("every pod replaced by one with the new config", rolled)
        cm = cluster.core.read_namespaced_config_map(f"{SCHEDULER}-config", namespace)
        assert cm.data["responses.yml"] == NEW_SCRIPT
        # Every pod answers from the new script (the service proxy picks a pod at random per request).
        answers = {
            api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "ping"}])
            .choices[0]
            .message.content
            for _ in range(6)
        }
        assert answers == {"pong, version 2"}
        other = api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "anything else"}])
        assert other.choices[0].message.content == "rolled out"


def children(cluster: Cluster, namespace: str, name: str) -> dict[str, list[str]]:
    """Every object still labelled as a child of ``name``, by kind."""
    labels = f"app.kubernetes.io/instance={name},app.kubernetes.io/managed-by=llmsim-operator"
    out = {
        "ConfigMap": cluster.core.list_namespaced_config_map(namespace, label_selector=labels).items,
        "Service": cluster.core.list_namespaced_service(namespace, label_selector=labels).items,
        "Deployment": cluster.apps.list_namespaced_deployment(namespace, label_selector=labels).items,
        "ReplicaSet": cluster.apps.list_namespaced_replica_set(namespace, label_selector=selector(name)).items,
        "Pod": cluster.core.list_namespaced_pod(namespace, label_selector=selector(name)).items,
    }
    found = {kind: [o.metadata.name for o in objs] for kind, objs in out.items()}
    pdbs = kubectl("-n", namespace, "get", "pdb", "-l", labels, "-o", "name").split()
    found["PodDisruptionBudget"] = pdbs
    return found


def test_deleting_the_simulator_removes_every_child(
    cluster: Cluster, fleets: dict[str, dict[str, Any]], namespace: str
) -> None:
    before = children(cluster, namespace, SCHEDULER)
    assert all(before.values()), before  # one of each kind exists, or this test would prove nothing
    cluster.custom.delete_namespaced_custom_object("llmsim.io", "v1alpha1", namespace, "llmsimulators", SCHEDULER)
    wait_for("the LLMSimulator to go", lambda: cluster.simulator(namespace, SCHEDULER) is None)

    def all_gone() -> bool:
        return not any(children(cluster, namespace, SCHEDULER).values())

    wait_for("the garbage collector to remove every child", all_gone)
