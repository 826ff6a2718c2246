"""The operator killed while it reconciles a burst of new LLMSimulators: its replacement converges,
with exactly one child of each kind per LLMSimulator and none orphaned.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from e2e.cluster import OPERATOR_NAMESPACE, Cluster, wait_for

pytestmark = pytest.mark.e2e

BURST = 10
#: Killed after this many creations, while the operator works through them.
KILL_AFTER = 4
#: Replicas 0: every child object, no pods (the burst tests the operator, not the node).
SPEC: dict[str, Any] = {"model": {"name": "burst"}, "engine": "instant", "replicas": 0}


def reconciled(obj: dict[str, Any] | None) -> bool:
    status = (obj or {}).get("status") or {}
    conds = {c["type"]: c["status"] for c in status.get("conditions", [])}
    return (
        obj is not None
        and status.get("observedGeneration") == obj["metadata"]["generation"]
        and conds.get("Degraded") == "False"
        and conds.get("Ready") == "True"
        and "configHash" in status
    )


def test_operator_killed_mid_burst_converges_to_one_child_of_each_kind(cluster: Cluster, namespace: str) -> None:
    first = cluster.operator_pod()
    assert first.status.container_statuses[0].restart_count == 0
    names = [f"burst-{i}" for i in range(BURST)]
    uids = {}
    done_at_kill = -1
    for i, name in enumerate(names):
        uids[name] = cluster.create_simulator(namespace, name, SPEC)["metadata"]["uid"]
        if i == KILL_AFTER:
            done_at_kill = sum(reconciled(cluster.simulator(namespace, n)) for n in names[: i + 1])
            # No grace period: the process dies wherever it is, as in a node failure or an OOM kill.
            cluster.core.delete_namespaced_pod(first.metadata.name, OPERATOR_NAMESPACE, grace_period_seconds=0)
    assert done_at_kill < KILL_AFTER + 1, "the operator had finished before it was killed: nothing was interrupted"

    def replacement_ready() -> Any:
        pod = cluster.operator_pod()
        ready = pod.metadata.name != first.metadata.name and pod.status.container_statuses
        return pod if ready and pod.status.container_statuses[0].ready else None

    wait_for("a new operator pod to be Ready", replacement_ready)

    def all_reconciled() -> bool:
        return all(reconciled(cluster.simulator(namespace, name)) for name in names)

    wait_for("every LLMSimulator of the burst reconciled", all_reconciled)

    managed = "app.kubernetes.io/managed-by=llmsim-operator"
    live = {o["metadata"]["uid"]: o["metadata"]["name"] for o in cluster.custom.list_namespaced_custom_object(
        "llmsim.io", "v1alpha1", namespace, "llmsimulators")["items"]}  # fmt: skip
    for kind, objects in (
        ("ConfigMap", cluster.core.list_namespaced_config_map(namespace, label_selector=managed).items),
        ("Deployment", cluster.apps.list_namespaced_deployment(namespace, label_selector=managed).items),
        ("Service", cluster.core.list_namespaced_service(namespace, label_selector=managed).items),
    ):
        owners = [o.metadata.owner_references[0].uid for o in objects]
        assert set(owners) <= set(live), f"{kind}s owned by no live LLMSimulator: {set(owners) - set(live)}"
        per_owner = Counter(owners)
        assert {live[uid]: per_owner[uid] for uid in uids.values()} == dict.fromkeys(names, 1), kind
