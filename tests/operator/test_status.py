"""Status mapping from a Deployment and a reconcile result to conditions and counts."""

from __future__ import annotations

from typing import Any

import pytest

from llmsim_operator.status import Reconciled, deployment_conditions, reconciled_status, with_deployment

T0, T1 = "2025-01-01T00:00:00Z", "2025-01-01T00:05:00Z"


def deployment(
    replicas: int = 2,
    ready: int = 0,
    updated: int = 0,
    available: int = 0,
    total: int | None = None,
    generation: int = 1,
    observed: int = 1,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed,
            "replicas": updated if total is None else total,
            "readyReplicas": ready,
            "updatedReplicas": updated,
            "availableReplicas": available,
            "conditions": conditions or [],
        },
    }


def by_type(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def ok(generation: int = 3) -> Reconciled:
    return Reconciled(generation, "app=x", True, "http://x.ns.svc:8000", 7609, "abc", None)


def test_all_ready_and_rolled_out() -> None:
    ready, progressing = deployment_conditions(deployment(2, ready=2, updated=2, available=2))
    assert (ready.status, ready.reason, ready.message) == (True, "ReplicasReady", "2/2 replicas ready")
    assert (progressing.status, progressing.reason) == (False, "RolloutComplete")


@pytest.mark.parametrize(
    ("dep", "reason"),
    [
        (deployment(2, ready=2, updated=2, available=2, generation=2, observed=1), "RollingOut"),  # not yet seen
        (deployment(2, ready=2, updated=1, available=2, total=3), "RollingOut"),  # old pods remain
        (deployment(2, ready=1, updated=2, available=1), "RollingOut"),  # a pod not available yet
    ],
)
def test_rollouts_in_progress(dep: dict[str, Any], reason: str) -> None:
    assert deployment_conditions(dep)[1].reason == reason
    assert deployment_conditions(dep)[1].status is True


def test_stalled_rollout() -> None:
    stalled = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "m"}]
    _, progressing = deployment_conditions(deployment(1, conditions=stalled))
    assert (progressing.status, progressing.reason, progressing.message) == (False, "ProgressDeadlineExceeded", "m")


def test_scaled_to_zero_is_ready() -> None:
    ready, _ = deployment_conditions(deployment(0))
    assert (ready.status, ready.reason) == (True, "ScaledToZero")


def test_missing_deployment() -> None:
    status = with_deployment({}, None, T0)
    assert (status["replicas"], status["readyReplicas"], status["ready"]) == (0, 0, "0/0")
    assert by_type(status)["Ready"]["reason"] == "DeploymentMissing"


def test_counts_come_from_the_deployment() -> None:
    status = with_deployment({}, deployment(3, ready=1, updated=3, available=1), T0)
    assert (status["replicas"], status["readyReplicas"], status["ready"]) == (3, 1, "1/3")


def test_reconciled_status_has_every_field() -> None:
    status = reconciled_status({}, ok(), deployment(2, ready=2, updated=2, available=2), T0)
    assert status["observedGeneration"] == 3
    assert status["selector"] == "app=x"
    assert status["endpoint"] == "http://x.ns.svc:8000"
    assert status["kvCacheBlocks"] == 7609
    assert status["configHash"] == "abc"
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Progressing", "Degraded"]
    assert by_type(status)["Degraded"] == {
        "type": "Degraded",
        "status": "False",
        "reason": "Reconciled",
        "message": "all children applied",
        "lastTransitionTime": T0,
    }


def test_transition_time_moves_only_when_the_status_flips() -> None:
    first = reconciled_status({}, ok(), deployment(2, ready=1, updated=2, available=1), T0)
    same = reconciled_status(first, ok(), deployment(2, ready=1, updated=2, available=1), T1)
    assert by_type(same)["Ready"]["lastTransitionTime"] == T0
    flipped = reconciled_status(first, ok(), deployment(2, ready=2, updated=2, available=2), T1)
    assert by_type(flipped)["Ready"]["lastTransitionTime"] == T1
    assert by_type(flipped)["Degraded"]["lastTransitionTime"] == T0


def test_invalid_spec_keeps_what_is_running_and_reports_degraded() -> None:
    good = reconciled_status({}, ok(3), deployment(2, ready=2, updated=2, available=2), T0)
    bad = Reconciled(4, "app=x", False, None, None, None, ("InvalidSpec", "boom"))
    status = reconciled_status(good, bad, deployment(2, ready=2, updated=2, available=2), T1)
    assert status["observedGeneration"] == 4
    assert (status["kvCacheBlocks"], status["configHash"]) == (7609, "abc")
    degraded = by_type(status)["Degraded"]
    assert (degraded["status"], degraded["reason"], degraded["message"]) == ("True", "InvalidSpec", "boom")
    assert degraded["lastTransitionTime"] == T1
    assert by_type(status)["Ready"]["status"] == "True"


def test_a_valid_render_without_kv_drops_the_old_capacity() -> None:
    old = reconciled_status({}, ok(), None, T0)
    fixed = Reconciled(4, "app=x", True, "http://x.ns.svc:8000", None, "def", None)
    assert "kvCacheBlocks" not in reconciled_status(old, fixed, None, T1)


def test_deployment_refresh_keeps_reconcile_fields() -> None:
    good = reconciled_status({}, ok(3), deployment(2), T0)
    refreshed = with_deployment(good, deployment(2, ready=2, updated=2, available=2), T1)
    assert refreshed["observedGeneration"] == 3
    assert by_type(refreshed)["Degraded"] == by_type(good)["Degraded"]
    assert refreshed["ready"] == "2/2"
